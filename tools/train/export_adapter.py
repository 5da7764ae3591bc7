#!/usr/bin/env python3
"""Writes a trained checkpoint as a PEFT LoRA adapter directory that specd's runtime loads
(model/runtime/lora.c): adapter_config.json + adapter_model.safetensors, tensors
  base_model.model.model.layers.L.{self_attn|mlp}.<module>.lora_{A|B}.weight
A [r, in], B [out, r], in --dtype (F16 default: half the size of F32, and the loader widens to
F32). q_proj/k_proj B rows go back to HF order (training ran in GGUF order; see isd_model.py).

A checkpoint trained with --train-mask-embedding also gets `mask_embedding` [n_embd], F32 always
(one row: size does not matter, and the mask rows' input should not be rounded), flagged by
"specd_mask_embedding": true in adapter_config.json. specd's ISD policies feed it as the input
vector of every mask row (specd_lora_mask_embedding); the clean rows keep the token embeddings, so
R-ISD stays lossless. specd builds that predate it refuse such an adapter ("tensor mask_embedding is
not a LoRA A/B weight") rather than run it with the wrong mask input; other PEFT readers see an
unexpected key.

A train_wedlm.py checkpoint (args "objective": "wedlm") gets "specd_objective": "wedlm",
"specd_shift": 0 and "specd_block" instead of "specd_train_strides": its mask rows are unshifted
(run it as --policy wedlm --policy-opts adapter=DIR,shift=0). A train_sdar.py checkpoint
("objective": "sdar") gets "specd_objective": "sdar" and "specd_block" (--policy sdar
--policy-opts adapter=DIR,block=B); a distill_simsd_drafter.py one also "specd_n_layers" (the
SimSD drafter: the model cut after that many blocks)."""
import argparse, json, os, sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from isd_model import hf_rows  # noqa: E402
import target_record  # noqa: E402

ATTN = {"q_proj", "k_proj", "v_proj", "o_proj"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default=".train/isd/ckpt.pt")
    ap.add_argument("--out", default="artifacts/adapters/smollm2-135m-risd")
    ap.add_argument("--dtype", choices=["f16", "bf16", "f32"], default="f16")
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--base", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    ap.add_argument("--target", default=target_record.TARGET_DEFAULT,
                    help="the GGUF it was trained over, recorded in target.json")
    ap.add_argument("--specd", default="build/specd", help="computes the target's fingerprint")
    a = ap.parse_args()
    ck = torch.load(a.ckpt, map_location="cpu")
    args = ck["args"]
    dt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[a.dtype]
    tensors, targets = {}, set()
    for name, t in ck["lora"].items():
        # "<layer>.<module>.<A|B>"
        layer, module, which = name.split(".")
        if which == "B" and module in ("q_proj", "k_proj"):
            t = hf_rows(t, a.head_dim)
        block = "self_attn" if module in ATTN else "mlp"
        key = f"base_model.model.model.layers.{layer}.{block}.{module}.lora_{which}.weight"
        tensors[key] = t.detach().to(dt).contiguous()
        targets.add(module)
    mask = args.get("train_mask_embedding") and ck.get("mask_emb") is not None
    if mask:
        v = ck["mask_emb"].detach().float().reshape(-1).contiguous()
        if not torch.isfinite(v).all():
            sys.exit("export: the checkpoint's mask embedding is not finite")
        tensors["mask_embedding"] = v
    os.makedirs(a.out, exist_ok=True)
    save_file(tensors, os.path.join(a.out, "adapter_model.safetensors"))
    order = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": a.base,
           "r": args["rank"], "lora_alpha": args["alpha"], "lora_dropout": 0.0, "bias": "none",
           "fan_in_fan_out": False, "use_dora": False,
           "target_modules": [m for m in order if m in targets],
           "specd_mask_token_id": args["mask_token_id"],
           "specd_gate": "mask rows only (R-ISD)",
           "specd_train_strides": args["strides"]}
    if args.get("objective") == "wedlm":
        # train_wedlm.py: unshifted mask rows (each predicts its own position), so specd's wedlm
        # policy must read them with shift=0; R-ISD checkpoints keep the keys above unchanged
        del cfg["specd_train_strides"]
        cfg["specd_gate"] = "mask rows only (WeDLM)"
        cfg.update({"specd_objective": "wedlm", "specd_shift": 0, "specd_block": args["block"],
                    "specd_policy_opts": "shift=0"})
    elif args.get("objective") == "sdar":
        # train_sdar.py: unshifted block rows, the adapter on every block row (policy sdar)
        del cfg["specd_train_strides"]
        cfg["specd_gate"] = "every block row (SDAR)"
        cfg.update({"specd_objective": "sdar", "specd_block": args["block"],
                    "specd_policy_opts": f"block={args['block']}"})
        if args.get("n_layers"):
            # distill_simsd_drafter.py: a drafter for the model cut after n_layers blocks (LoRA
            # tensors of layers 0..n_layers-1 only); run it with specd's context n_layers
            cfg["specd_n_layers"] = args["n_layers"]
            cfg["specd_gate"] = "every block row (SDAR), first n_layers blocks (SimSD drafter)"
    if mask:
        cfg["specd_mask_embedding"] = True
    with open(os.path.join(a.out, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    size = os.path.getsize(os.path.join(a.out, "adapter_model.safetensors"))
    print(f"wrote {len(tensors)} tensors, {size / 1e6:.2f} MB, to {a.out}")
    target_record.write(a.out, a.target, a.specd)


if __name__ == "__main__":
    main()
