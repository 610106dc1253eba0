# alloc_heavy.py: an allocation-heavy Python program for the benchmarks, run with
# PYTHONMALLOC=malloc so that every object, small ones included, comes from malloc rather
# than from pymalloc's arenas. Deterministic: its output is the same under every
# allocator, and the driver compares it with glibc's.
#
# Usage: python3 alloc_heavy.py [SCALE]
import hashlib
import json
import random
import sys

scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
n = max(1000, int(120000 * scale))
rng = random.Random(12345)


def digest(obj):
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


class Node:
    __slots__ = ("key", "value", "children")

    def __init__(self, key, value):
        self.key = key
        self.value = value
        self.children = []


# many small objects, then a random half dropped, as a long-running program's heap goes
nodes = {}
for i in range(n):
    node = Node("k%07d" % rng.randrange(n * 4), [i, str(i), (i, i * 2)])
    nodes[node.key] = node
    if i % 3 == 0 and i:
        parent = nodes.get("k%07d" % rng.randrange(n * 4))
        if parent is not None:
            parent.children.append(node)
keys = sorted(nodes)
for key in keys[::2]:
    del nodes[key]
total = sum(len(v.children) + v.value[0] for v in nodes.values())
print("nodes", len(nodes), total)

# strings of every length: built, split, joined, replaced
words = ["w" * (1 + i % 40) + str(i) for i in range(n)]
text = " ".join(words)
parts = text.split(" ")
joined = "-".join(p.upper() for p in parts[::3]).replace("W", "v")
print("strings", len(text), len(parts), len(joined), digest(joined[-200:]))

# lists of tuples sorted, sliced and deleted from
data = [(rng.random(), i, "x" * (i % 100)) for i in range(n)]
data.sort()
del data[::4]
print("list", len(data), digest(data[:: max(1, n // 500)]))

# growing containers: lists appended to, dicts resized, sets unioned
buckets = [[] for _ in range(1000)]
for i in range(n * 2):
    buckets[(i * 7919) % 1000].append(i)
seen = set()
for b in buckets:
    seen |= set(b[::5])
print("buckets", sum(map(len, buckets)), len(seen))

# json round trip of a nested structure
tree = {"n%d" % i: {"c": list(range(i % 23)), "s": "v" * (i % 13)} for i in range(n // 5)}
blob = json.dumps(tree, sort_keys=True)
back = json.loads(blob)
print("json", len(blob), back == tree)
