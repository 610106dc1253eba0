# programs_workload.bash: a deterministic bash workload for programs.sh: indexed and
# associative arrays, string operations, command substitution and subshells.
set -u
export LC_ALL=C

declare -a list=()
for ((i = 0; i < 20000; i++)); do
	list+=("item-$((i * 7919 % 20011))")
done
echo "array ${#list[@]} ${list[0]} ${list[19999]}"

declare -A seen=()
for x in "${list[@]}"; do
	seen[${x%?}]=$(( ${seen[${x%?}]:-0} + 1 ))
done
echo "assoc ${#seen[@]}"
printf '%s\n' "${!seen[@]}" | sort | head -n 3 | tr '\n' ' '
echo

s=""
for ((i = 0; i < 3000; i++)); do
	s+="abc$i,"
done
echo "string ${#s} ${s:100:20} ${s//abc/X} " | cut -c1-80
upper=${s^^}
echo "upper ${upper:0:30}"
IFS=, read -r -a fields <<<"$s"
echo "split ${#fields[@]} ${fields[2999]}"

total=0
for ((i = 0; i < 200; i++)); do
	v=$( (echo $((i * i)); echo "$i") | head -n 1)
	total=$((total + v))
done
echo "subshells $total"

out=$( for ((i = 0; i < 500; i++)); do echo "line $i"; done | ( while read -r a b; do echo "$b:$a"; done ) | sort -t: -k1,1n | tail -n 2 | tr '\n' ' ')
echo "pipeline $out"

f() { local -a arr=("$@"); echo "${#arr[@]}:${arr[*]: -1}"; }
for ((i = 1; i <= 5; i++)); do
	f $(seq 1 $((i * 1000)))
done
echo "done"
