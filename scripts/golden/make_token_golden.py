#!/usr/bin/env python3
"""Generates tests/data/tokenizer_golden.tsv: llama.cpp's token ids (and detokenized bytes, EOG ids
and chat template renderings) for the default model, the oracle tests/tokenizer checks specd's
tokenizer against. Offline tool: run it when regenerating goldens, never in CI.

Needs the PyPI package llama-cpp-python 0.3.36 (which vendors the llama.cpp that is the oracle):
    python3 -m venv ~/.cache/specd/venv-llama &&
        ~/.cache/specd/venv-llama/bin/pip install llama-cpp-python==0.3.36
    ~/.cache/specd/venv-llama/bin/python scripts/golden/make_token_golden.py

Besides the model's own pre-tokenizer ('smollm'), the same vocabulary is run through llama.cpp's
'qwen2' and 'qwen35' pre-tokenizers (Qwen2/Qwen2.5/Qwen3 and Qwen3.5 models) by writing
vocab-only copies of the GGUF metadata with tokenizer.ggml.pre changed; the qwen2 copy also sets
add_bos_token/add_eos_token so that the ADD_SPECIAL path is checked.

Output, one record per line, fields separated by tabs (hex = lowercase hex of the bytes):
    E  pre  flags  hex(input)  ids             flags: 1 add_special, 2 parse_special
    D  pre  flags  ids  hex(output)            flags: 1 render special, 2 remove special
    G  pre  ids                                every id llama_vocab_is_eog accepts
    C  add_generation_prompt  hex(role)=hex(content);...  hex(rendered)
"""
import argparse
import codecs
import ctypes
import os
import random
import struct
import sys
import tempfile

import jinja2
import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODEL = os.path.expanduser("~/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf")


# --- GGUF metadata copy with some keys replaced (no tensors: loaded with vocab_only) ----------
def read_kvs(path):
    data = open(path, "rb").read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, data, off)
        off += struct.calcsize(fmt)
        return v[0]

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(t):
        nonlocal off
        if t == 8:
            n = take("Q")
            off += n
        elif t == 9:
            et = take("I")
            n = take("Q")
            for _ in range(n):
                skip_value(et)
        else:
            off += sizes[t]

    assert data[:4] == b"GGUF"
    off = 4
    version = take("I")
    take("Q")  # tensors
    n_kv = take("Q")
    kvs = []
    for _ in range(n_kv):
        start = off
        klen = take("Q")
        key = data[off:off + klen].decode()
        off += klen
        t = take("I")
        skip_value(t)
        kvs.append((key, data[start:off]))
    return version, kvs


def kv_string(key, value):
    k = key.encode()
    v = value.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, len(v)) + v


def kv_bool(key, value):
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<IB", 7, 1 if value else 0)


def write_variant(version, kvs, path, replace):
    out = []
    seen = set()
    for key, raw in kvs:
        if key in replace:
            out.append(replace[key])
            seen.add(key)
        else:
            out.append(raw)
    for key, raw in replace.items():
        if key not in seen:
            out.append(raw)
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", version, 0, len(out)))
        for raw in out:
            f.write(raw)


# --- inputs --------------------------------------------------------------------------------------
def load_strings(path):
    out = [b""]
    for line in open(path, "rb").read().split(b"\n"):
        if not line or line.startswith(b"#"):
            continue
        out.append(codecs.escape_decode(line)[0])
    return out


def generated_strings(n, seed=1234):
    """Random mixtures of the awkward parts: scripts, digits, whitespace runs, specials, bad bytes."""
    parts = ["the", " cat", "Hello", "world", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "'s",
             "'LL", "'re", "1", "23", "456", "7890", ".", ",", "!", "?", "...", "-", "_", "(",
             ")", "{", "}", "<", ">", "|", "é", "e\u0301", "ß", "Ж", "λ", "你好", "世界", "こんにちは",
             "한국어", "مرحبا", "नमस्ते", "😀", "👍🏽", "🇫🇷", "\u00a0", "\u3000", "\u2003", "²", "½",
             "Ⅻ", "٣", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>", "user",
             "assistant", "def ", "return", "==", "+=", "->", "//", "#", "$", "%", "&", "@"]
    bad = [b"\x80", b"\xff", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\x80", b"\xed\xa0\x80"]
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = rng.randint(1, 14)
        s = b""
        for _ in range(k):
            if rng.random() < 0.08:
                s += rng.choice(bad)
            else:
                s += rng.choice(parts).encode()
        out.append(s)
    return out


def random_codepoint_strings(n, seed):
    """Random code points from every plane (letters, marks, digits, spaces, unassigned...) and raw
    bytes, for a wider (uncommitted) check: --random N. Byte sequences that llama.cpp's decoder
    reads as a code point above U+10FFFF are left out: llama.cpp throws on them."""
    import re
    rng = random.Random(seed)
    bad = re.compile(rb"[\xf5-\xf7][\x80-\xbf]{3}|\xf4[\x90-\xbf][\x80-\xbf]{2}")
    pools = [(0x20, 0x7F), (0x09, 0x0E), (0xA0, 0x250), (0x300, 0x370), (0x370, 0x2000),
             (0x2000, 0x2070), (0x3000, 0x3100), (0x4E00, 0xA000), (0xAC00, 0xD7A4),
             (0xE000, 0xFFFE), (0x10000, 0x110000), (0x1F300, 0x1FAFF)]
    out = []
    while len(out) < n:
        s = b""
        for _ in range(rng.randint(1, 40)):
            if rng.random() < 0.05:
                s += bytes([rng.randrange(256)])
                continue
            lo, hi = rng.choice(pools)
            cp = rng.randrange(lo, hi)
            if 0xD800 <= cp < 0xE000:
                continue
            s += chr(cp).encode("utf-8")
        if not bad.search(s):
            out.append(s)
    return out


# --- llama.cpp calls -----------------------------------------------------------------------------
def tokenize(vocab, text, add_special, parse_special):
    cap = max(16, 2 * len(text) + 8)
    buf = (llama_cpp.llama_token * cap)()
    n = llama_cpp.llama_tokenize(vocab, text, len(text), buf, cap, add_special, parse_special)
    assert n >= 0, (text, n)
    return list(buf[:n])


def detokenize(vocab, ids, remove_special, unparse_special):
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    cap = 64 + 64 * len(ids)
    buf = ctypes.create_string_buffer(cap)
    n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, cap, remove_special, unparse_special)
    assert n >= 0, (ids, n)
    return buf.raw[:n]


def open_vocab(path):
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    return llm, llm._model.vocab


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--strings", default=os.path.join(HERE, "golden_strings.txt"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "tokenizer_golden.tsv"))
    ap.add_argument("--random", type=int, default=0,
                    help="add N random code point strings (wider check; not for the committed file)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    strings = load_strings(args.strings) + generated_strings(120)
    if args.random:
        strings += random_codepoint_strings(args.random, args.seed)
    version, kvs = read_kvs(args.model)
    tmp = tempfile.mkdtemp()
    variants = [("smollm", args.model, [0, 2])]
    for pre, extra in (("qwen2", True), ("qwen35", False)):
        path = os.path.join(tmp, pre + ".gguf")
        repl = {"tokenizer.ggml.pre": kv_string("tokenizer.ggml.pre", pre)}
        if extra:
            repl["tokenizer.ggml.add_bos_token"] = kv_bool("tokenizer.ggml.add_bos_token", True)
            repl["tokenizer.ggml.add_eos_token"] = kv_bool("tokenizer.ggml.add_eos_token", True)
        write_variant(version, kvs, path, repl)
        variants.append((pre, path, [1, 3] if extra else [0, 2]))

    lines = ["# Generated by scripts/golden/make_token_golden.py with llama-cpp-python %s from %s "
             "(%d input strings). Do not edit." % (llama_cpp.__version__,
                                                   os.path.basename(args.model), len(strings))]
    template = None
    for pre, path, flag_sets in variants:
        llm, vocab = open_vocab(path)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]
        lines.append("G\t%s\t%s" % (pre, " ".join(map(str, eog))))
        for s in strings:
            for flags in flag_sets:
                ids = tokenize(vocab, s, bool(flags & 1), bool(flags & 2))
                lines.append("E\t%s\t%d\t%s\t%s" % (pre, flags, s.hex(), " ".join(map(str, ids))))
                if flags & 2:
                    for dflags in (0, 1, 2, 3) if pre == "qwen2" else (0, 1):
                        out = detokenize(vocab, ids, bool(dflags & 2), bool(dflags & 1))
                        lines.append("D\t%s\t%d\t%s\t%s" % (pre, dflags, " ".join(map(str, ids)),
                                                          out.hex()))
        if pre == "smollm":
            template = llm.metadata.get("tokenizer.chat_template")
        del llm

    # Chat template: render the model's own Jinja template.
    env = jinja2.Environment(loader=jinja2.BaseLoader())
    tpl = env.from_string(template)
    chats = [
        [("user", "Hello!")],
        [("system", "You are terse."), ("user", "Hi")],
        [("user", "What is 2+2?"), ("assistant", "4"), ("user", "And 3+3?")],
        [("system", ""), ("user", "")],
        [("assistant", "I start."), ("user", "ok")],
        [("user", "multi\nline\n\ncontent with <|im_end|> inside")],
        [("user", "caf\u00e9 \u4f60\u597d \U0001F600")],
        [],
    ]
    for msgs in chats:
        for add_gen in (0, 1):
            rendered = tpl.render(messages=[{"role": r, "content": c} for r, c in msgs],
                                  add_generation_prompt=bool(add_gen)).encode()
            enc = ";".join("%s=%s" % (r.encode().hex(), c.encode().hex()) for r, c in msgs)
            lines.append("C\t%d\t%s\t%s" % (add_gen, enc, rendered.hex()))

    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s: %d records, %d input strings" % (args.out, len(lines) - 1, len(strings)))


if __name__ == "__main__":
    main()
