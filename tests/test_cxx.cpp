// test_cxx.cpp: C++ programs reach uslub through libstdc++'s operator new.
//
// Run under LD_PRELOAD. operator new calls malloc, so when the preload works, 4 MiB of
// objects from new / new[] show in uslub's in_use (found with dlsym) and leave it on
// delete. Then std::vector, std::string, std::map and an over-aligned new do real work
// whose results are checked. Prints "test_cxx: N checks passed" or each failure.
#include <dlfcn.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "uslub.h"

static unsigned long checks, failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		checks++;                                                                          \
		if (!(cond)) {                                                                     \
			failures++;                                                                \
			std::fprintf(stderr, "FAIL %s:%d: %s\n    ", __FILE__, __LINE__, #cond);   \
			std::fprintf(stderr, __VA_ARGS__);                                         \
			std::fputc('\n', stderr);                                                  \
		}                                                                                  \
	} while (0)

using totals_fn = void (*)(struct uslub_totals *);

static totals_fn find_totals()
{
	void *sym = dlsym(RTLD_DEFAULT, "uslub_get_totals");
	totals_fn fn = nullptr;
	static_assert(sizeof(fn) == sizeof(sym), "function and data pointers differ");
	std::memcpy(&fn, &sym, sizeof(fn));
	return fn;
}

static uint64_t in_use(totals_fn fn)
{
	struct uslub_totals t;
	std::memset(&t, 0, sizeof(t));
	fn(&t);
	return t.in_use;
}

struct Node {
	uint64_t payload[8]; // 64 bytes: kmalloc-64
	explicit Node(uint64_t v)
	{
		for (auto &p : payload)
			p = v;
	}
};

struct alignas(256) Wide {
	unsigned char bytes[256];
};

int main(int, char **argv)
{
	// a statistics dump asked for by the caller's environment would mix with the
	// report: run again without it (the library read it at load time)
	if (std::getenv("USLUB_STATS") != nullptr || std::getenv("USLUB_STATS_FILE") != nullptr) {
		::unsetenv("USLUB_STATS");
		::unsetenv("USLUB_STATS_FILE");
		::execv("/proc/self/exe", argv);
	}
	std::printf("test_cxx: new/delete, std::vector, std::string, std::map under "
		    "LD_PRELOAD\n");
	totals_fn fn = find_totals();
	CHECK(fn != nullptr,
	      "uslub_get_totals not found: libuslub.so is not preloaded "
	      "(LD_PRELOAD=%s)",
	      std::getenv("LD_PRELOAD") ? std::getenv("LD_PRELOAD") : "");

	if (fn != nullptr) {
		std::printf("  - 65536 x new Node (64 B) and new char[1 MiB] x 2 show in "
			    "in_use and leave it on delete\n");
		const size_t count = 65536; // 4 MiB of 64-byte objects
		uint64_t before = in_use(fn);
		std::vector<Node *> nodes;
		nodes.reserve(count);
		for (size_t i = 0; i < count; i++)
			nodes.push_back(new Node(i));
		char *big1 = new char[1 << 20];
		char *big2 = new char[1 << 20];
		std::memset(big1, 1, 1 << 20);
		std::memset(big2, 2, 1 << 20);
		uint64_t with = in_use(fn);
		CHECK(with >= before + 4 * (uint64_t(1) << 20) + 2 * (uint64_t(1) << 20),
		      "in_use %" PRIu64 " before, %" PRIu64 " with 4 MiB of Nodes and 2 MiB of "
		      "char[]: operator new does not reach uslub",
		      before, with);
		bool intact = true;
		for (size_t i = 0; i < count; i++)
			intact = intact && nodes[i]->payload[0] == i && nodes[i]->payload[7] == i;
		CHECK(intact, "a Node lost its payload");
		for (Node *n : nodes)
			delete n;
		delete[] big1;
		delete[] big2;
		uint64_t after = in_use(fn);
		CHECK(after + 5 * (uint64_t(1) << 20) <= with,
		      "in_use %" PRIu64 " with the objects, %" PRIu64 " after delete", with, after);
	}

	std::printf("  - std::vector grows to 1,000,000 elements and keeps them\n");
	{
		std::vector<uint64_t> v;
		for (uint64_t i = 0; i < 1000000; i++)
			v.push_back(i * 3);
		uint64_t sum = 0;
		for (uint64_t x : v)
			sum += x;
		CHECK(sum == 3ull * 999999ull * 1000000ull / 2, "sum %" PRIu64, sum);
		v.resize(10);
		v.shrink_to_fit();
		CHECK(v.size() == 10 && v[9] == 27, "after shrink: size %zu", v.size());
	}

	std::printf("  - std::string concatenation, copies and substrings\n");
	{
		std::string s;
		for (int i = 0; i < 20000; i++)
			s += std::to_string(i % 10);
		CHECK(s.size() == 20000, "size %zu", s.size());
		std::vector<std::string> copies(200, s);
		size_t total = 0;
		for (auto &c : copies)
			total += c.substr(100, 50).size() + (c == s ? 1 : 0);
		CHECK(total == 200 * 51, "total %zu", total);
		CHECK(s.compare(0, 10, "0123456789") == 0, "prefix %s", s.substr(0, 10).c_str());
	}

	std::printf("  - std::map of 100,000 string keys: insert, find, erase half\n");
	{
		std::map<std::string, int> m;
		for (int i = 0; i < 100000; i++)
			m["key-" + std::to_string(i)] = i;
		CHECK(m.size() == 100000, "size %zu", m.size());
		CHECK(m["key-4242"] == 4242, "m[key-4242] = %d", m["key-4242"]);
		for (int i = 0; i < 100000; i += 2)
			m.erase("key-" + std::to_string(i));
		CHECK(m.size() == 50000, "size after erase %zu", m.size());
		long sum = 0;
		for (auto &kv : m)
			sum += kv.second;
		CHECK(sum == 2500000000L, "sum %ld", sum);
	}

	std::printf("  - over-aligned new (alignas(256)) and std::unique_ptr<T[]>\n");
	{
		std::vector<std::unique_ptr<Wide>> ws;
		for (int i = 0; i < 100; i++) {
			ws.emplace_back(new Wide);
			CHECK((reinterpret_cast<uintptr_t>(ws.back().get()) & 255) == 0,
			      "new Wide = %p", static_cast<void *>(ws.back().get()));
			std::memset(ws.back()->bytes, i, sizeof(ws.back()->bytes));
		}
		std::unique_ptr<int[]> arr(new int[300000]());
		bool zero = true;
		for (int i = 0; i < 300000; i++)
			zero = zero && arr[i] == 0;
		CHECK(zero, "new int[300000]() is not zeroed");
	}

	if (failures == 0) {
		std::printf("test_cxx: %lu checks passed\n", checks);
		return 0;
	}
	std::printf("test_cxx: %lu of %lu checks FAILED\n", failures, checks);
	return 1;
}
