-- tables.lua: a table-heavy Lua program for the benchmarks: arrays and hash tables built,
-- grown, emptied at random, sorted and turned into strings, so the Lua heap (which Lua
-- takes from realloc/free) churns through many sizes. Deterministic: its output is the
-- same under every allocator, and the driver compares it with glibc's.
--
-- Usage: lua5.4 tables.lua [SCALE]
local scale = tonumber(arg[1] or "1")
local n = math.max(1000, math.floor(300000 * scale))
local seed = 12345
local function rand(m)
	seed = (seed * 1103515245 + 12345) % 2147483648
	return seed % m
end

-- records in a hash table, then a random half removed; the removals go by insertion
-- order, as pairs() order changes from run to run with Lua's per-process hash seed
local records, keys = {}, {}
for i = 1, n do
	local k = "k" .. rand(n * 4)
	keys[i] = k
	records[k] = { id = i, name = "item" .. i, tags = { i % 7, i % 11, i % 13 } }
end
for i = 1, n do
	if rand(2) == 0 then
		records[keys[i]] = nil
	end
end
local count, sum = 0, 0
for _, v in pairs(records) do
	count = count + 1
	sum = sum + v.id + #v.tags
end
print("records", count, sum)

-- arrays grown one element at a time, then sorted
local arrays = {}
for a = 1, 200 do
	local t = {}
	for i = 1, n // 100 do
		t[#t + 1] = rand(1000000)
	end
	table.sort(t)
	arrays[a] = t
end
local s = 0
for a = 1, #arrays do
	s = s + arrays[a][1] + arrays[a][#arrays[a]]
end
print("arrays", #arrays, s)

-- strings: concatenation through table.concat, gsub, and keys made of them
local parts = {}
for i = 1, n do
	parts[i] = string.rep("x", i % 50) .. i
end
local text = table.concat(parts, ",")
local replaced, nrep = text:gsub("x+", "y")
local freq = {}
for w in replaced:gmatch("[^,]+") do
	local key = w:sub(1, 3)
	freq[key] = (freq[key] or 0) + 1
end
local nkeys = 0
for _ in pairs(freq) do
	nkeys = nkeys + 1
end
print("strings", #text, #replaced, nrep, nkeys)

-- a tree of small tables, walked and dropped
local function build(depth)
	if depth == 0 then
		return { leaf = true }
	end
	return { left = build(depth - 1), right = build(depth - 1), depth = depth }
end
local function size(t)
	if t.leaf then
		return 1
	end
	return 1 + size(t.left) + size(t.right)
end
local nodes = 0
for _ = 1, math.max(1, n // 40000) do
	nodes = nodes + size(build(16))
end
print("tree", nodes)
