#!/usr/bin/python3
"""Holds README.md to the code it documents.

- Every variable of the option table in core/os/options.c is a row of the README's table
  under "## Environment variables", with the same default (the first `value` or word of
  the default column), and the table names no variable the option table does not know.
- Every command in tools/uslub's usage text is a row of the table under "## Tools".
- Every relative link of the README resolves to a file of the repository.

Usage: test_readme.py [SOURCE_ROOT] (default: the parent of this file's folder).
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def constants():
    """#define NAME number and enum members in core/, size_classes/ and include/."""
    consts = {}
    for top in ("core", "size_classes", "include"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if not name.endswith((".h", ".c")):
                    continue
                text = open(os.path.join(d, name), encoding="utf-8").read()
                for m in re.finditer(r"^#define\s+(\w+)\s+\(?(\d+)[uUlL]*\)?", text, re.M):
                    consts[m.group(1)] = int(m.group(2))
                for m in re.finditer(r"\benum\s+\w*\s*\{([^}]*)\}", text):
                    value = 0
                    for item in m.group(1).split(","):
                        item = re.sub(r"/\*.*?\*/", "", item).strip()
                        if not item:
                            continue
                        if "=" in item:
                            item, v = (s.strip() for s in item.split("=", 1))
                            value = int(v, 0) if re.fullmatch(r"\d+|0x[0-9a-fA-F]+", v) else consts.get(v, value)
                        consts[item] = value
                        value += 1
    return consts


def option_table():
    """[(name, default as the README writes it)] from core/os/options.c."""
    text = read("core/os/options.c")
    body = text.split("options[] = {", 1)[1].split("\n};", 1)[0]
    consts = constants()
    entry = re.compile(r'\{\s*"(USLUB_\w+)",\s*(OPT_\w+),\s*CFG\(\w+\),\s*(\w+),\s*[^,]+,\s*[^,]+,\s*(NULL|"[^"]*")')
    opts = []
    for m in entry.finditer(body):
        name, kind, dflt, choices = m.groups()
        value = int(dflt) if dflt.isdigit() else consts.get(dflt)
        if value is None:
            sys.exit("test_readme: cannot resolve %s's default %s" % (name, dflt))
        if kind == "OPT_CHOICE":
            expect = choices.strip('"').split("|")[value]
        elif kind in ("OPT_UINT", "OPT_BYTES"):
            expect = str(value)
        else:  # strings with a syntax: 0 means not set
            expect = "unset" if value == 0 else str(value)
        opts.append((name, expect))
    if len(opts) < 10:
        sys.exit("test_readme: read only %d options from core/os/options.c" % len(opts))
    return opts


def section(readme, title):
    m = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(title), readme, re.M | re.S)
    return m.group(1) if m else ""


def table_rows(text):
    """The first markdown table of text: (header cells, [row cells])."""
    rows = [l for l in text.split("\n") if l.startswith("|")]
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", l.strip())[1:-1]] for l in rows]
    if len(cells) < 2:
        return [], []
    return cells[0], [c for c in cells[2:]]


def first_value(cell):
    m = re.match(r"\s*`([^`]*)`", cell)
    if m:
        return m.group(1)
    return cell.split()[0] if cell.split() else ""


def commands():
    text = read("tools/uslub")
    usage = text.split("usage() {", 1)[1].split("\nEOF", 1)[0]
    cmds = re.findall(r"^  ([a-z][a-z-]*)(?:\s|$)", usage, re.M)
    if len(cmds) < 5:
        sys.exit("test_readme: read only %d commands from tools/uslub's usage" % len(cmds))
    return cmds


def main():
    readme = read("README.md")
    errors = []

    header, rows = table_rows(section(readme, "Environment variables"))
    if "default" not in header:
        errors.append("README.md: no table with a 'default' column under '## Environment variables'")
        rows = []
    col = header.index("default") if "default" in header else 0
    documented = {}
    for r in rows:
        m = re.fullmatch(r"`(USLUB_\w+)`", r[0])
        if m and len(r) > col:
            documented[m.group(1)] = r[col]
    known = set()
    for name, expect in option_table():
        known.add(name)
        if name not in documented:
            errors.append("README.md: %s (core/os/options.c) is missing from the variable table" % name)
        elif first_value(documented[name]) != expect:
            errors.append("README.md: %s's default is '%s' in the README, '%s' in core/os/options.c"
                          % (name, first_value(documented[name]), expect))
    for name in sorted(set(documented) - known):
        errors.append("README.md: %s is in the variable table but not in core/os/options.c" % name)

    _, tool_rows = table_rows(section(readme, "Tools"))
    described = set()
    for r in tool_rows:
        m = re.match(r"`tools/uslub ([a-z][a-z-]*)", r[0])
        if m and len(r) > 1 and r[1].strip():
            described.add(m.group(1))
    for cmd in commands():
        if cmd not in described:
            errors.append("README.md: 'tools/uslub %s' (tools/uslub's usage) is not described under '## Tools'" % cmd)

    for target in re.findall(r"\]\(([^)\s]+)\)", readme):
        if re.match(r"[a-z]+:|#", target):
            continue
        path = target.split("#", 1)[0]
        if not os.path.exists(os.path.join(ROOT, path)):
            errors.append("README.md: link %s does not resolve to a file" % target)

    for e in errors:
        print(e)
    print("test_readme: %d options, %d commands checked, %d errors"
          % (len(known), len(commands()), len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
