#!/usr/bin/env python3
"""Writes another target for the artifact tests: a copy of MODEL with its output_norm weight's
first value scaled by 1.25, as a finetune would change it. The tokenizer and shape stay, so only
the target fingerprint (policy/artifacts.h) tells the two apart; the copy still runs.

usage: make_other_target.py SPECD MODEL OUT"""
import json
import shutil
import struct
import subprocess
import sys

specd, model, out = sys.argv[1:4]
shutil.copyfile(model, out)
d = json.loads(subprocess.run([specd, "inspect", "--json", out], check=True, capture_output=True,
                              text=True).stdout)
t = next(x for x in d["tensors"] if x["name"] == "output_norm.weight")
if t["type"] != "F32":
    sys.exit("make_other_target: output_norm.weight is %s, not F32" % t["type"])
with open(out, "r+b") as f:
    f.seek(d["data_offset"] + t["offset"])
    v, = struct.unpack("<f", f.read(4))
    f.seek(d["data_offset"] + t["offset"])
    f.write(struct.pack("<f", v * 1.25))
