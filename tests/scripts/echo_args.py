"""Parses its own arguments (some look like advisor options) and reports what it saw as JSON."""

import argparse
import json
import os
import sys

import advisor

parser = argparse.ArgumentParser()
parser.add_argument("--out")
parser.add_argument("-q", action="store_true")
parser.add_argument("--timeout", type=float)
parser.add_argument("rest", nargs="*")
args = parser.parse_args()
print(json.dumps({
    "argv": sys.argv,
    "parsed": vars(args),
    "path0": sys.path[0],
    "name": __name__,
    "file": __file__,
    "cwd": os.getcwd(),
}))
for _ in range(3):
    advisor.step()
