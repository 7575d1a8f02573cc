#!/usr/bin/env python3
"""Vendors the chosen subset of Ceph's s3-tests (github.com/ceph/s3-tests).

Usage: vendor.py UPSTREAM_CHECKOUT

Copies the package's support modules as they are and writes
s3tests/functional/test_s3.py with only the tests named in tests.txt (one
name per line, '#' comments), their decorators, and the module-level
helpers and constants they reach, in upstream order. Every line kept is
upstream's; nothing is edited.
"""
import ast
import os
import shutil
import sys

here = os.path.dirname(os.path.abspath(__file__))
up = sys.argv[1]
src_path = os.path.join(up, "s3tests", "functional", "test_s3.py")
src = open(src_path).read()
lines = src.splitlines(keepends=True)
tree = ast.parse(src)

wanted = []
for line in open(os.path.join(here, "tests.txt")):
    line = line.split("#", 1)[0].strip()
    if line:
        wanted.append(line)

defs = {}
for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        defs[node.name] = node
    elif isinstance(node, ast.Assign):
        for tgt in node.targets:
            for n in ast.walk(tgt):
                if isinstance(n, ast.Name):
                    defs[n.id] = node

missing = [w for w in wanted if w not in defs]
if missing:
    sys.exit("not in upstream: " + ", ".join(missing))

keep = set()
todo = list(wanted)
while todo:
    name = todo.pop()
    node = defs[name]
    if id(node) in keep:
        continue
    keep.add(id(node))
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in defs and not n.id.startswith("test_"):
            todo.append(n.id)

out = []
for node in tree.body:
    start = node.lineno
    if getattr(node, "decorator_list", None):
        start = min(d.lineno for d in node.decorator_list)
    if isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in keep:
        # comments and blank lines directly above a kept node go with it
        s = start - 1
        while s > 0 and lines[s - 1].lstrip().startswith("#"):
            s -= 1
        out.append("".join(lines[s:node.end_lineno]))
os.makedirs(os.path.join(here, "s3tests", "functional"), exist_ok=True)
with open(os.path.join(here, "s3tests", "functional", "test_s3.py"), "w") as f:
    f.write("\n\n".join(out) + "\n")

for rel in ["LICENSE", "pytest.ini", os.path.join("s3tests", "__init__.py"),
            os.path.join("s3tests", "functional", "__init__.py"),
            os.path.join("s3tests", "functional", "utils.py"),
            os.path.join("s3tests", "functional", "policy.py"),
            os.path.join("s3tests", "functional", "iam.py")]:
    dst = os.path.join(here, rel)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(os.path.join(up, rel), dst)
print("vendored %d tests" % len(wanted))
