#!/usr/bin/python3
"""Holds the shape of core/: layers that only include downward, and small files.

The order of the layers is written once, in core/meson.build (`core_layers`, lowest
first). A file of a layer's folder may include the headers of its own layer, of the layers
before it, and the shared files at the top of core/ (types.h, stat_items.h, hooks.h),
which every layer stands on and which include none of the layers' headers. A file that includes a header of a
later layer is an upward dependency: the layers above are reached through the hooks
(core/hooks.h), never by name. Every file of core/ also stays under MAX_LINES lines.

The check is run twice: on the tree as it is (every error printed, exit 1 if any), and on
the same tree with one upward include added on purpose, which it must report - so the test
cannot pass by finding nothing to look at.

Given the built engine (libuslub_core.a), the same order is checked on what the objects
link to: no object refers to a function or variable defined by an object of a later
layer. This catches what an include cannot show (a local `extern` declaration).

And every call of core/ and preload/ that may sleep in the kernel or runs code not ours
is made inside USLUB_OUT (core/calls_out.h), on its line, so the idle drain can tell a
thread parked in a call of its own; a call planted without it must be reported.

Usage: test_layers.py [SOURCE_ROOT [LIBUSLUB_CORE_A]]
"""
import os
import re
import subprocess
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = os.path.join(ROOT, "core")
MAX_LINES = 600
SHARED = "(shared)"


def layer_order():
    text = open(os.path.join(CORE, "meson.build"), encoding="utf-8").read()
    m = re.search(r"^core_layers\s*=\s*\[([^\]]*)\]", text, re.M)
    if not m:
        sys.exit("test_layers: no core_layers list in core/meson.build")
    layers = re.findall(r"'([^']+)'", m.group(1))
    if len(layers) < 2:
        sys.exit("test_layers: core_layers lists %d layers" % len(layers))
    return layers


def core_files():
    """{path relative to core/: text} for every .c and .h under core/."""
    files = {}
    for d, _, names in os.walk(CORE):
        for name in names:
            if name.endswith((".c", ".h")):
                path = os.path.relpath(os.path.join(d, name), CORE)
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    files[path] = f.read()
    return files


def rank_of(path, layers):
    """The layer rank of a file: its folder's place in the order; the shared files at the
    top of core/ sit below the first layer; None for a folder of no layer."""
    folder = path.split(os.sep)[0] if os.sep in path else None
    if folder is None:
        return SHARED, -1.0
    if folder not in layers:
        return folder, None
    return folder, float(layers.index(folder))


def check(files, layers):
    errors = []
    for path, text in sorted(files.items()):
        folder, rank = rank_of(path, layers)
        if rank is None:
            errors.append("core/%s: folder '%s' is not in core_layers" % (path, folder))
            continue
        lines = text.count("\n")
        if lines > MAX_LINES:
            errors.append("core/%s: %d lines (at most %d)" % (path, lines, MAX_LINES))
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            target = m.group(1)
            if target not in files:
                continue  # include/uslub.h, size_classes.h, uslub_config.h: below every layer
            tfolder, trank = rank_of(target, layers)
            if trank is None or trank > rank:
                errors.append("core/%s:%d: includes %s, of layer %s above its own (%s)"
                              % (path, n, target, tfolder, folder))
    return errors


def object_layer(member, layers):
    """core_page_buddy.c.o -> page; core_hooks.c.o -> shared; others (size_classes) -> None."""
    m = re.match(r"core_([a-z_]+?)_[^_]+\.c\.o$", member)
    if m and m.group(1) in layers:
        return m.group(1), float(layers.index(m.group(1)))
    if re.match(r"core_[^_]+\.c\.o$", member):
        return SHARED, -1.0
    return None, None


def check_objects(archive, layers):
    out = subprocess.run(["nm", archive], check=True, capture_output=True, text=True).stdout
    defined, undefined, member = {}, {}, None
    for line in out.splitlines():
        if line.endswith(".o:"):
            member = line[:-1]
            undefined[member] = set()
            continue
        parts = line.split()
        if member is None or not parts:
            continue
        if len(parts) == 3 and parts[1] in "TDBRCV":
            defined[parts[2]] = member
        elif len(parts) == 2 and parts[0] == "U":
            undefined[member].add(parts[1])
    if len(undefined) < 10:
        sys.exit("test_layers: only %d objects in %s" % (len(undefined), archive))
    errors = []
    for member, syms in sorted(undefined.items()):
        layer, rank = object_layer(member, layers)
        if rank is None:
            continue
        for sym in sorted(syms):
            owner = defined.get(sym)
            if not owner:
                continue
            olayer, orank = object_layer(owner, layers)
            if orank is not None and orank > rank:
                errors.append("%s (%s) refers to %s of %s (%s)" % (member, layer, sym, owner, olayer))
    return errors, len(undefined)


# Calls that may sleep in the kernel or run code not ours (core/os/os.h, USLUB_OUT): each
# must be made inside USLUB_OUT or USLUB_OUT_VOID, on the same line, so the idle drain can
# tell a thread parked in its own call from one parked inside the allocator. The names
# after the system's are our pointers to code not ours (a C++ new_handler is not among
# them: preload/new_handler.c calls it between two whole allocations, and it may throw).
CALLS_OUT = (
    "pthread_mutex_lock pthread_create pthread_join pthread_once pthread_setname_np pthread_atfork "
    "dlopen dlsym dlclose urcu_bp_synchronize_rcu urcu_bp_barrier urcu_bp_call_rcu "
    "urcu_bp_read_lock urcu_bp_before_fork urcu_bp_after_fork_parent "
    "urcu_bp_after_fork_child mmap munmap mremap madvise mprotect syscall open read write "
    "close fstat fcntl ftruncate unlink nanosleep sysconf process_vm_readv getrandom "
    "flavour_call_rcu flavour_barrier ctor os_mbind numa.available numa.max_node "
    "numa.distance numa.node_of_cpu call barrier").split()
CALL_RE = re.compile(r"(?<![\w.>])(?:c->)?(%s)\s*\(" % "|".join(re.escape(n) for n in CALLS_OUT))


def strip_comments(text):
    """The text with /* */ and // comments and string literals blanked, lines kept."""
    out = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    out = re.sub(r'"(?:\\.|[^"\\\n])*"', lambda m: '"' + " " * (len(m.group(0)) - 2) + '"', out)
    return re.sub(r"//[^\n]*", "", out)


def check_calls_out(sources):
    """Lines of {path: text} that call out without USLUB_OUT."""
    errors = []
    for path, text in sorted(sources.items()):
        if not path.endswith(".c"):
            continue
        for n, line in enumerate(strip_comments(text).split("\n"), 1):
            for m in CALL_RE.finditer(line):
                if "USLUB_OUT" not in line:
                    errors.append("%s:%d: %s() called outside USLUB_OUT" % (path, n, m.group(1)))
    return errors


def preload_files():
    d = os.path.join(ROOT, "preload")
    # bounds.c is libuslub_bounds.so's (USLUB_DEBUG=B's memcpy), no part of the allocator.
    return {os.path.join("..", "preload", n): open(os.path.join(d, n), encoding="utf-8").read()
            for n in os.listdir(d) if n.endswith(".c") and n != "bounds.c"}


def main():
    layers = layer_order()
    files = core_files()
    if len(files) < 10:
        sys.exit("test_layers: only %d files under %s" % (len(files), CORE))
    errors = check(files, layers)
    for e in errors:
        print(e)

    # The same check must catch an upward include: the lowest layer's first .c file
    # including a header of the top layer.
    low = sorted(p for p in files if p.startswith(layers[0] + os.sep) and p.endswith(".c"))
    top = sorted(p for p in files if p.startswith(layers[-1] + os.sep) and p.endswith(".h"))
    if not low or not top:
        sys.exit("test_layers: no .c file in %s/ or no header in %s/" % (layers[0], layers[-1]))
    planted = dict(files)
    planted[low[0]] = '#include "%s"\n' % top[0] + files[low[0]]
    caught = [e for e in check(planted, layers) if low[0] in e and top[0] in e]
    if not caught:
        print("test_layers: an include of %s planted in %s was not reported" % (top[0], low[0]))
        errors.append("self-test")

    out_sources = dict(files)
    out_sources.update(preload_files())
    out_errors = check_calls_out(out_sources)
    for e in out_errors:
        print(e)
    errors += out_errors
    # ... and must catch one planted.
    planted = {"os/planted.c": "static void f(void) { munmap(0, 0); }\n"}
    if not check_calls_out(planted):
        print("test_layers: a munmap() planted outside USLUB_OUT was not reported")
        errors.append("self-test")

    objects = 0
    if len(sys.argv) > 2:
        obj_errors, objects = check_objects(sys.argv[2], layers)
        for e in obj_errors:
            print(e)
        errors += obj_errors

    print("test_layers: %d files, %d objects, layers %s, %d errors"
          % (len(files), objects, " < ".join(layers), len(errors)))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
