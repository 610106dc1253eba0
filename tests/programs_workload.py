# programs_workload.py: a deterministic Python workload for programs.sh (run with
# PYTHONMALLOC=malloc, so every object comes from malloc): dicts, lists, strings,
# sets, sorting, json, and threads whose results are printed in a fixed order.
import hashlib
import json
import threading

def digest(obj):
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]

# dicts and strings
words = {}
for i in range(200000):
    key = "w%d" % ((i * 7919) % 50000)
    words[key] = words.get(key, 0) + len(key) * (i % 7)
print("dict", len(words), sum(words.values()), digest(sorted(words.items())[:1000]))

# lists: build, slice, sort, delete
data = [((i * 2654435761) % 1000003, "item-%06d" % i) for i in range(150000)]
data.sort()
print("list", len(data), data[0], data[-1], digest(data[::997]))
del data[::3]
print("list after del", len(data), digest(data[:500]))

# strings: join, split, replace, formatting
text = " ".join("token%d" % (i % 1234) for i in range(100000))
parts = text.split(" ")
joined = "|".join(p.upper() for p in parts[:20000]).replace("TOKEN", "t")
print("str", len(text), len(parts), len(joined), digest(joined[-300:]))

# sets and nested structures through json
tree = {"n%d" % i: {"children": list(range(i % 17)), "name": "node" * (i % 5)}
        for i in range(20000)}
blob = json.dumps(tree, sort_keys=True)
back = json.loads(blob)
print("json", len(blob), back == tree, len({c for v in back.values()
                                               for c in v["children"]}))

# threads: each builds its own structures; results collected by index
results = [None] * 8

def work(idx):
    acc = {}
    for j in range(30000):
        s = "t%d-%d" % (idx, j % 3001)
        acc.setdefault(s, []).append(j)
    results[idx] = (idx, len(acc), sum(len(v) for v in acc.values()),
                    digest(sorted(acc)[:50]))

threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for r in results:
    print("thread", *r)

# big strings and bytes
big = bytearray(8 * 1024 * 1024)
for i in range(0, len(big), 4096):
    big[i] = i % 251
print("bytes", len(big), hashlib.sha256(big).hexdigest()[:16])
print("done")
