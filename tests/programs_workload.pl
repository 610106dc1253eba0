# programs_workload.pl: a deterministic Perl workload for programs.sh: hashes, arrays,
# sorting, string building, regular expressions. Output depends only on the data.
use strict;
use warnings;

my %count;
for my $i (0 .. 199_999) {
    my $key = sprintf("k%05d", ($i * 7919) % 60_000);
    $count{$key} += $i % 13;
}
my @keys = sort { $count{$b} <=> $count{$a} || $a cmp $b } keys %count;
print "hash ", scalar(keys %count), " top @keys[0 .. 4] last $keys[-1]\n";

my @records = map { [ ($_ * 2654435761) % 1_000_003, "rec$_" ] } 0 .. 149_999;
my @sorted = sort { $a->[0] <=> $b->[0] || $a->[1] cmp $b->[1] } @records;
print "sort $sorted[0][1] $sorted[-1][1] ", scalar(@sorted), "\n";

my $text = join(" ", map { "word" . ($_ % 977) } 0 .. 99_999);
my %freq;
$freq{$1}++ while $text =~ /(word\d*7)\b/g;
my $n = 0;
$n += $_ for values %freq;
print "regex ", scalar(keys %freq), " $n\n";
(my $copy = $text) =~ s/word(\d+)/W$1/g;
print "subst ", length($copy), " ", substr($copy, -40), "\n";

my %nested;
for my $i (0 .. 49_999) {
    push @{ $nested{ $i % 101 }{ $i % 7 } }, $i;
}
my $sum = 0;
for my $x (sort { $a <=> $b } keys %nested) {
    for my $y (sort { $a <=> $b } keys %{ $nested{$x} }) {
        $sum += scalar(@{ $nested{$x}{$y} }) * ($x + 1) * ($y + 1);
    }
}
print "nested ", scalar(keys %nested), " $sum\n";
delete @count{ grep { /[13579]$/ } keys %count };
print "after delete ", scalar(keys %count), "\n";
print "done\n";
