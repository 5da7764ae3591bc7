#!/usr/bin/env python3
"""The ChatML token ids of tools/train/prompts.txt, as `specd generate` feeds them, for trainers that
run where specd is not built (gpu_train.py on a GPU machine has torch but no libspecd and no
tokenizer package). Written with specd's own tokenizer through the Python binding
(bindings/python, libspecd from $SPECD_LIBRARY or build/libspecd.so), so the ids are specd's.

  chat_ids.py write [--model M] [--prompts P] [--out tools/train/prompts.chatml.json]
  chat_ids.py check [...]   exit 1 (with the first difference) when the file is stale

The file records the sha256 of the prompts file and of the model's tokenizer arrays
(tokenizer.ggml.tokens and .merges as GGUF stores them), the end-of-generation ids, and per prompt
(one per non-empty line, as specd-gen-data reads them) its ids."""
import argparse, hashlib, json, os, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL_DEFAULT = os.path.expanduser("~/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf")
OUT_DEFAULT = os.path.join(HERE, "prompts.chatml.json")


def read_prompts(path):
    with open(path, encoding="utf-8") as f:
        return [ln.rstrip("\r\n") for ln in f if ln.rstrip("\r\n")]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tokenizer_sha256(model):
    """sha256 over the GGUF's tokenizer.ggml.tokens and tokenizer.ggml.merges strings (each
    length-prefixed): what decides the ids, independent of the weights' quantization. A small
    GGUF metadata walk (numpy-free), so both this tool and gpu_train.py compute it the same way."""
    want = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}
    h = hashlib.sha256()
    with open(model, "rb") as f:
        def rd(fmt):
            n = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, f.read(n))

        def rstr():
            (n,) = rd("Q")
            return f.read(n)

        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

        def skip(t):
            if t == 8:
                rstr()
            elif t == 9:
                et, n = rd("IQ")
                for _ in range(n):
                    skip(et)
            else:
                f.seek(sizes[t], 1)

        magic, version = f.read(4), rd("I")[0]
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"{model}: not a GGUF v2+ file")
        _, n_kv = rd("QQ")
        for _ in range(n_kv):
            key = rstr().decode()
            (t,) = rd("I")
            if key in want and t == 9:
                et, n = rd("IQ")
                if et != 8:
                    raise ValueError(f"{model}: {key} is not a string array")
                h.update(key.encode() + struct.pack("<Q", n))
                for _ in range(n):
                    s = rstr()
                    h.update(struct.pack("<Q", len(s)) + s)
                want.discard(key)
            else:
                skip(t)
    if want:
        raise ValueError(f"{model}: no {sorted(want)}")
    return h.hexdigest()


def encode_all(model, prompts):
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
    lib = os.path.join(ROOT, "build", "libspecd.so")
    if not os.environ.get("SPECD_LIBRARY") and os.path.exists(lib):
        os.environ["SPECD_LIBRARY"] = lib
    from specd.runtime import Model
    m = Model(model)
    tok = m.tokenizer()
    return tok.eog_tokens(), [tok.encode_chat(p) for p in prompts]


def build(model, prompts_path):
    prompts = read_prompts(prompts_path)
    eog, ids = encode_all(model, prompts)
    return {"what": "ChatML token ids of each prompt as `specd generate` encodes it (default "
                    "system message, user turn, assistant header); written by chat_ids.py",
            "prompts_file": os.path.relpath(os.path.abspath(prompts_path), ROOT),
            "prompts_sha256": sha256_file(prompts_path),
            "tokenizer_sha256": tokenizer_sha256(model),
            "eog": eog, "n_prompts": len(ids), "ids": ids}


def dump(d):
    """One prompt per line, so diffs stay readable."""
    head = {k: v for k, v in d.items() if k != "ids"}
    body = ",\n".join("  " + json.dumps(x, separators=(",", ":")) for x in d["ids"])
    return json.dumps(head, indent=1)[:-2] + ',\n "ids": [\n' + body + "\n ]\n}\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=["write", "check"])
    ap.add_argument("--model", default=MODEL_DEFAULT)
    ap.add_argument("--prompts", default=os.path.join(HERE, "prompts.txt"))
    ap.add_argument("--out", default=OUT_DEFAULT)
    a = ap.parse_args()
    d = build(a.model, a.prompts)
    if a.cmd == "write":
        with open(a.out + ".tmp", "w") as f:
            f.write(dump(d))
        os.replace(a.out + ".tmp", a.out)
        n = sum(len(x) for x in d["ids"])
        print(f"wrote {a.out}: {d['n_prompts']} prompts, {n} ids, eog {d['eog']}")
        return
    old = json.load(open(a.out))
    for k in ("prompts_sha256", "tokenizer_sha256", "eog", "n_prompts"):
        if old.get(k) != d[k]:
            sys.exit(f"{a.out} is stale: {k} {old.get(k)} != {d[k]} (run chat_ids.py write)")
    for i, (x, y) in enumerate(zip(old["ids"], d["ids"])):
        if x != y:
            sys.exit(f"{a.out} is stale: prompt {i} ids differ (run chat_ids.py write)")
    print(f"{a.out}: up to date ({d['n_prompts']} prompts)")


if __name__ == "__main__":
    main()
