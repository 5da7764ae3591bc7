#!/usr/bin/env python3
"""Writes a random PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors, F32) for a
llama-shaped model, to try R-ISD's gate by hand:

    tools/make_random_adapter.py /tmp/rand_lora            # SmolLM2-135M shapes
    specd ab --policy risd --policy-opts adapter=/tmp/rand_lora --prompts examples/prompts.txt

q_proj, v_proj and down_proj of every layer get A and B uniform in [-amp, amp] from a seeded
generator (the same C writer is tests/policy/self/isd_random_adapter.h). Standard library only."""
import argparse, json, os, random, struct

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--layers", type=int, default=30)
ap.add_argument("--embd", type=int, default=576)
ap.add_argument("--ff", type=int, default=1536)
ap.add_argument("--q-out", type=int, default=576)
ap.add_argument("--kv-out", type=int, default=192)
ap.add_argument("--rank", type=int, default=8)
ap.add_argument("--amp", type=float, default=0.1)
ap.add_argument("--seed", type=int, default=7)
a = ap.parse_args()
os.makedirs(a.dir, exist_ok=True)
with open(os.path.join(a.dir, "adapter_config.json"), "w") as f:
    json.dump({"r": a.rank, "lora_alpha": 2 * a.rank, "peft_type": "LORA",
               "target_modules": ["q_proj", "v_proj", "down_proj"]}, f)
mods = [("self_attn.q_proj", a.embd, a.q_out), ("self_attn.v_proj", a.embd, a.kv_out),
        ("mlp.down_proj", a.ff, a.embd)]
rng = random.Random(a.seed)
header, blobs, off = {}, [], 0
for layer in range(a.layers):
    for name, n_in, n_out in mods:
        for ab, shape in (("A", [a.rank, n_in]), ("B", [n_out, a.rank])):
            n = shape[0] * shape[1]
            header[f"base_model.model.model.layers.{layer}.{name}.lora_{ab}.weight"] = {
                "dtype": "F32", "shape": shape, "data_offsets": [off, off + 4 * n]}
            blobs.append(struct.pack(f"<{n}f", *(rng.uniform(-a.amp, a.amp) for _ in range(n))))
            off += 4 * n
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(a.dir, "adapter_model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for b in blobs:
        f.write(b)
