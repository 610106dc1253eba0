"""Run by tests/meson.build under LD_PRELOAD=libuslub.so (test 'rlimit-python').

A real program out of address space: with RLIMIT_AS set a little above what the
interpreter already uses, allocating until the limit must raise MemoryError - never
crash - for small objects through malloc (PYTHONMALLOC=malloc), for 1 MiB blocks
(uslub's large blocks) and for 16 MiB ones (huge blocks, an mmap each). Before it, at
least 80% of the headroom must have been handed out in objects - uslub maps address
space as its heap grows (when each region reserved 256 MiB whole, 1 MiB blocks got a
third of it) - and the 16 MiB blocks must find the address space the dropped 1 MiB ones
held. After the objects are dropped the same allocations succeed again. Exit 0 on
success, 77 when uslub is not the malloc in this process.
"""
import gc
import resource
import sys


def vm_size():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")


def preloaded():
    with open("/proc/self/maps") as f:
        return "libuslub" in f.read()


def fill(make, limit_items):
    """Allocate with make() until MemoryError; return how many succeeded."""
    held = []
    try:
        for _ in range(limit_items):
            held.append(make())
    except MemoryError:
        n = len(held)
        del held
        gc.collect()
        return n, True
    return len(held), False


def main():
    if not preloaded():
        print("libuslub.so is not loaded: skipped")
        return 77
    headroom = 768 << 20
    limit = vm_size() + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    print(f"RLIMIT_AS = VmSize + {headroom >> 20} MiB")
    kinds = [
        ("1 MiB bytearrays", lambda: bytearray(1 << 20), 100000),
        ("16 MiB bytearrays", lambda: bytearray(16 << 20), 100000),
        ("200-byte objects", lambda: b"x" * 200 + bytes(1), 50000000),
    ]
    failed = 0
    for name, make, cap in kinds:
        size = sys.getsizeof(make())
        n, hit = fill(make, cap)
        share = n * size / headroom
        print(f"{name}: MemoryError after {n} ({share:.0%} of the headroom)"
              if hit else f"{name}: no MemoryError")
        if not hit:
            failed += 1
        if share < 0.8:
            print(f"{name}: only {share:.0%} of the headroom before MemoryError")
            failed += 1
        # The heap recovers: the same allocation works again once memory is dropped.
        try:
            x = [make() for _ in range(8)]
            del x
        except MemoryError:
            print(f"{name}: still MemoryError after freeing")
            failed += 1
    print("ok" if not failed else "FAILED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
