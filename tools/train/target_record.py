#!/usr/bin/env python3
"""Records the target an artifact was trained over, so specd uses it by default exactly where
that target is loaded, whatever path names the model (policy/artifacts.h): `target.json` inside an
adapter directory, `<file>.target.json` beside a file artifact (a draft head). The fingerprint is
the one `specd inspect --json MODEL` prints (target_fingerprint: the tokenizer, the shape and the
norm weights, so every quantization of one model shares it).

  python3 tools/train/target_record.py ARTIFACT [--target MODEL.gguf] [--specd build/specd]

export_adapter.py and export_mrp.py call write() after writing their artifact."""
import argparse, json, os, subprocess, sys

TARGET_DEFAULT = os.path.expanduser("~/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def fingerprint(model, specd="build/specd"):
    out = subprocess.run([specd, "inspect", "--json", model], check=True, capture_output=True,
                         text=True).stdout
    fp = json.loads(out).get("target_fingerprint")
    if not fp:
        sys.exit(f"target_record: {model} has no target fingerprint (no tokenizer?)")
    return fp


def record_path(artifact):
    return (os.path.join(artifact, "target.json") if os.path.isdir(artifact)
            else artifact + ".target.json")


def write(artifact, model, specd="build/specd"):
    rec = {"target_fingerprint": fingerprint(model, specd),
           "target": os.path.basename(model),
           "written_by": "tools/train/target_record.py"}
    path = record_path(artifact)
    with open(path, "w") as f:
        json.dump(rec, f, indent=2)
        f.write("\n")
    print(f"wrote {path}: target {rec['target']} ({rec['target_fingerprint']})")
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("artifact", help="an adapter directory or a file (a draft head GGUF)")
    ap.add_argument("--target", default=TARGET_DEFAULT, help="the GGUF it was trained over")
    ap.add_argument("--specd", default="build/specd")
    a = ap.parse_args()
    if not os.path.exists(a.artifact):
        sys.exit(f"target_record: no artifact at {a.artifact}")
    write(a.artifact, a.target, a.specd)


if __name__ == "__main__":
    main()
