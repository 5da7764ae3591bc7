#!/usr/bin/env python3
"""PyTorch + transformers as specd's host engine (host API v2 through the Python binding).

transformers runs the target, SmolLM2 loaded from the default GGUF (transformers reads GGUF when
the `gguf` package is installed), on the GPU when there is one: its model, its DynamicCache, its
forward. specd lays out each step (the pending token plus a policy's proposals), the step's rows'
logits go back to specd as a torch tensor where the model left them (on the GPU: a device
pointer, in the model's dtype, bf16 on CUDA), in a block whose rows carry -inf columns after the
vocabulary (row stride n_vocab + --pad), and specd decides what the target accepts; rejected
rows leave the cache by cropping it.

Every prompt is decoded plainly (policy none, one row per forward) and by each speculative mode
(ngram; draft: specd's draft policy with the default GGUF as its own drafter, run by specd's own
runtime), greedy and at T 0.8 under the coupled rule, with the same seed (seed + i for prompt i)
and slot, and each speculative output is compared with plain decoding's token by token. Where
they differ the program says where and why (from the logits rows each run decided that token
from): transformers does not promise that a position's logits are the same bits in a one-row
forward and a multi-row one.

    examples/torch_host.py [--model GGUF] [--device cuda|cpu] [--n 64] [--prompts FILE]
        [--n-prompts N] [--modes ngram,draft] [--temps 0,0.8] [--no-adaptive]
        [--verifier ENDPOINT|auto --verifier-bin build/specd-verifier]

With --verifier each speculative mode runs a second time ("MODE+verifier") with its drafting
steps decided by a specd-verifier daemon (specd_spec_params.verifier_endpoint; the logits travel
through its shared-memory buffer) and is compared with plain decoding too.

It prints, per mode and temperature, each prompt's identity, forwards, proposals and tokens/s,
then a summary line "summary: MODE greedy|coupled T 0.8: I of P prompts identical; TPF f;
acceptance a (x of y proposals); plain X tok/s, MODE Y tok/s, speedup Zx" (tokens/s over the
decode loops, prefill excluded), and last "torch_host: outputs identical to plain decoding:
yes|NO".
Exit: 0 when every output is identical, 3 when some differ (diagnosed), 1 on errors, 2 on usage.

Needs numpy, torch, transformers, gguf (and accelerate, which transformers asks for to load GGUF)
and libspecd: specd.load finds it through $SPECD_LIBRARY or pkg-config; the binding is imported
from bindings/python when it is not installed.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# a typed fingerprint for the verifier daemon (its --tokenizer-hash): this host and the daemon it
# starts share specd's tokenizer, which it checks itself
TOKENIZER_HASH = 0x70C4_0057_5EED_0001


def default_model():
    """The default GGUF where scripts/fetch-model and the tests put it."""
    for path in (os.environ.get("SPECD_MODEL"), os.environ.get("SPECD_TEST_MODEL"),
                 os.path.join(os.environ.get("SPECD_MODEL_DIR", "/nonexistent"), MODEL_NAME),
                 os.path.expanduser(os.path.join("~/.cache/specd/models", MODEL_NAME))):
        if path and os.path.isfile(path):
            return path
    return None


def import_specd():
    try:
        import specd
    except ImportError:
        sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
        import specd
    return specd


class TorchTarget:
    """The host engine's side: transformers' model and KV cache, and the padded logits block."""

    def __init__(self, torch, path, device, dtype, logits_dtype, pad, max_rows, side_stream):
        import transformers
        from packaging.version import Version
        from transformers import AutoModelForCausalLM
        self.torch, self.device = torch, torch.device(device)
        # `dtype` since transformers 4.56, `torch_dtype` before (and deprecated after)
        dtype_kw = ("dtype" if Version(transformers.__version__) >= Version("4.56")
                    else "torch_dtype")
        self.model = AutoModelForCausalLM.from_pretrained(
            os.path.dirname(path), gguf_file=os.path.basename(path), **{dtype_kw: dtype})
        self.model.to(self.device).eval()
        self.n_vocab = int(self.model.config.vocab_size)
        self.width = self.n_vocab + pad
        # the block handed to specd: rows n_vocab + pad wide, the padding -inf (never read)
        self.block = torch.full((max_rows, self.width), float("-inf"), dtype=logits_dtype,
                                device=self.device)
        self.cache = None
        # on CUDA the engine runs on a stream of its own, as serving engines do: specd reads the
        # block on the legacy default stream, so the binding waits for this one (specd.logits)
        self.stream = None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            if side_stream:
                self.stream = torch.cuda.Stream(self.device)

    def on_stream(self):
        import contextlib
        return (self.torch.cuda.stream(self.stream) if self.stream is not None
                else contextlib.nullcontext())

    def prefill(self, ids):
        from transformers import DynamicCache
        self.cache = DynamicCache()
        if len(ids):
            self._forward(ids, list(range(len(ids))))

    def cached(self):
        return self.cache.get_seq_length() if self.cache is not None else 0

    def _forward(self, tokens, pos):
        t = self.torch
        ids = t.tensor([list(tokens)], dtype=t.long, device=self.device)
        p = t.tensor([list(pos)], dtype=t.long, device=self.device)
        return self.model(input_ids=ids, position_ids=p, past_key_values=self.cache,
                          use_cache=True).logits[0]

    def step(self, plan):
        """Runs the step's tokens; returns the block's first len(plan.rows) rows (a view)."""
        if plan.visible is not None or plan.lora_path or plan.input_embd is not None:
            raise RuntimeError("this policy lays out steps with attention masks, adapters or "
                               "float-vector inputs; this host runs drafter-shaped steps only "
                               "(none, ngram, draft)")
        if len(plan.pos) and int(plan.pos[0]) != self.cached():
            raise RuntimeError(f"step at position {int(plan.pos[0])}, the cache holds "
                               f"{self.cached()} rows")
        logits = self._forward(plan.tokens, plan.pos)
        n = len(plan.rows)
        rows = self.torch.as_tensor(plan.rows, dtype=self.torch.long, device=self.device)
        self.block[:n, :self.n_vocab].copy_(logits.index_select(0, rows))
        return self.block[:n]

    def keep(self, n_tokens, keep):
        """Drops the step's rows specd did not keep (drafter-shaped steps keep a prefix)."""
        if list(keep) != list(range(len(keep))):
            raise RuntimeError(f"the policy kept rows {list(keep)}, not a prefix")
        if n_tokens > len(keep):
            # negative: remove that many rows (what transformers 4 and 5 both read)
            self.cache.crop(-(n_tokens - len(keep)))


def run_one(specd, target, spec, args, prompt, policy, options, temperature, stops, seed):
    """One generation: (tokens, rows each token was decided from, seconds, forwards, stats).
    Sampling is keyed on (seed, sequence 0): the stream key is the slot's, which a remote
    verifier's protocol carries."""
    spec.open(0, prompt, policy=policy, policy_options=options, temperature=temperature,
              seed=seed, rule="coupled", adaptive=not args.no_adaptive,
              max_tokens=args.n, stop_tokens=stops)
    try:
        tokens, rows, forwards = [], [], 0
        sync = target.device.type == "cuda"
        with target.on_stream():
            target.prefill(prompt[:-1])
            if sync:
                target.torch.cuda.synchronize()
            t0 = time.perf_counter()
            while not spec.done(0):
                batch = spec.layout([0])
                plan = batch.seqs[0]
                block = target.step(plan)
                [out] = spec.verify(block)  # under the engine's stream: the binding waits for it
                forwards += 1
                for k, tok in enumerate(out.emitted):
                    tokens.append(tok)
                    rows.append(block[min(k, len(plan.rows) - 1)].clone())
                target.keep(len(plan.tokens), out.keep)
            if sync:
                target.torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
        stats = spec.stats(0)
    finally:
        spec.close_seq(0)
    return tokens, rows, seconds, forwards, stats


def explain(tok, n_vocab, plain, other, d):
    """Where and why two runs of one prompt differ (as examples/llama_host.c says it)."""
    (pt, pr), (st, sr) = plain, other
    same, before = 0, 0.0
    for j in range(d):
        delta = (pr[j][:n_vocab].float() - sr[j][:n_vocab].float()).abs().max().item()
        same += delta == 0
        before = max(before, delta)
    a = pt[d] if d < len(pt) else -1
    b = st[d] if d < len(st) else -1
    print(f"    first difference at output token {d}: plain {tok.decode([a])!r} ({a}), "
          f"speculative {tok.decode([b])!r} ({b})" if a >= 0 and b >= 0 else
          f"    the outputs differ in length at token {d}")
    print(f"    before it: {same} of {d} positions had bitwise-equal logits rows in both runs "
          f"(max |delta| {before:.3g})")
    if a < 0 or b < 0:
        return
    x, y = pr[d][:n_vocab].float(), sr[d][:n_vocab].float()
    delta = (x - y).abs().max().item()
    print(f"    at it: the plain run's and the speculative run's rows differ by max |delta| "
          f"{delta:.3g}; "
          f"logit[plain] - logit[spec] = {(x[a] - x[b]).item():.4g} in the plain row, "
          f"{(y[a] - y[b]).item():.4g} in the speculative row")
    if delta > 0:
        print("    cause: the target computed this position's logits differently in the "
              "speculative run's forward (more rows) than in plain decoding's one-row forward "
              "(batch-variant numerics), not specd's acceptance")


def first_difference(a, b):
    for j, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return j
    return -1 if len(a) == len(b) else min(len(a), len(b))


def start_verifier(binary, n_vocab):
    """Starts specd-verifier on a fresh ipc:// endpoint; returns (endpoint, process, folder)."""
    d = tempfile.mkdtemp(prefix="specd-torch-host.")
    os.chmod(d, 0o700)
    ep = f"ipc://{d}/verifier.sock"
    log = open(os.path.join(d, "verifier.log"), "w")
    p = subprocess.Popen([binary, "--endpoint", ep, "--vocab", str(n_vocab),
                          "--tokenizer-hash", f"{TOKENIZER_HASH:016x}"], stderr=log)
    deadline = time.monotonic() + 60
    while not os.path.exists(f"{d}/verifier.sock"):
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            raise RuntimeError("specd-verifier did not start: " +
                               open(os.path.join(d, "verifier.log")).read())
        time.sleep(0.05)
    return ep, p, d


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=default_model(),
                    help="the GGUF (default: $SPECD_MODEL, $SPECD_TEST_MODEL, "
                         "$SPECD_MODEL_DIR or ~/.cache/specd/models)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--dtype", default=None, choices=("bfloat16", "float16", "float32"),
                    help="the model's dtype (default: bfloat16 on cuda, float32 on cpu)")
    ap.add_argument("--logits-dtype", default=None, choices=("bfloat16", "float16", "float32"),
                    help="the dtype of the block handed to specd (default: the model's)")
    ap.add_argument("--pad", type=int, default=128,
                    help="-inf columns after the vocabulary in each logits row (default 128)")
    ap.add_argument("--prompts", default=os.path.join(ROOT, "examples", "prompts.txt"))
    ap.add_argument("--n-prompts", type=int, default=0, help="the first N prompts (0: all)")
    ap.add_argument("--n", type=int, default=64, help="tokens per generation (default 64)")
    ap.add_argument("--modes", default="ngram,draft", help="speculative policies (ngram,draft)")
    ap.add_argument("--temps", default="0,0.8", help="temperatures (0: greedy; else coupled)")
    ap.add_argument("--seed", type=int, default=1, help="prompt i is sampled with seed + i")
    ap.add_argument("--max-draft", type=int, default=8)
    ap.add_argument("--no-adaptive", action="store_true", help="turn the adaptive guard off")
    ap.add_argument("--draft-device", default=None,
                    help="where specd's runtime runs the draft policy's model: cpu (default), "
                         "cuda or cuda:N (the CPU when this libspecd cannot make a context "
                         "there)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's)")
    ap.add_argument("--default-stream", action="store_true",
                    help="on CUDA, run the model on torch's default stream (default: a stream "
                         "of its own)")
    ap.add_argument("--verifier", default=None, metavar="ENDPOINT",
                    help="also run each speculative mode with its drafting steps verified by a "
                         "specd-verifier daemon at ENDPOINT (started with --vocab 49152 "
                         f"--tokenizer-hash {TOKENIZER_HASH:016x}); 'auto': start "
                         "--verifier-bin on a fresh ipc:// endpoint")
    ap.add_argument("--verifier-bin", default=None, help="the specd-verifier that 'auto' starts")
    a = ap.parse_args(argv)
    if not a.model:
        ap.error(f"no model: give --model or fetch it (scripts/fetch-model puts {MODEL_NAME} "
                 "under ~/.cache/specd/models)")
    if a.n < 1 or a.pad < 0 or a.max_draft < 1:
        ap.error("--n and --max-draft must be >= 1, --pad >= 0")
    if a.verifier == "auto" and not a.verifier_bin:
        ap.error("--verifier auto needs --verifier-bin")
    a.modes = [m for m in a.modes.split(",") if m]
    for m in a.modes:
        if m not in ("ngram", "draft"):
            ap.error(f"mode {m}: want ngram or draft")
    a.temps = [float(t) for t in a.temps.split(",") if t]
    return a


def main(argv=None):
    args = parse_args(argv)
    import warnings
    os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF conversion's progress bar
    import torch
    import transformers
    transformers.utils.logging.disable_progress_bar()
    # transformers 5 renames past_key_values; this host keeps the name 4.x and 5.x both read
    warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)
    specd = import_specd()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.startswith("cuda") else "float32"))
    logits_dtype = getattr(torch, args.logits_dtype) if args.logits_dtype else dtype
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)

    t0 = time.perf_counter()
    with specd.Model(args.model) as smodel, smodel.tokenizer() as tok:
        stops = tok.eog_tokens()
        with open(args.prompts) as f:
            prompts = [line.rstrip("\n") for line in f if line.strip()]
        if args.n_prompts:
            prompts = prompts[:args.n_prompts]
        # a step scores at most max_draft + 1 rows (drafter-shaped policies)
        target = TorchTarget(torch, args.model, device, dtype, logits_dtype, args.pad,
                             args.max_draft + 1, side_stream=not args.default_stream)
        args.draft_device = draft_device(specd, smodel, args.draft_device or "cpu")
        if target.n_vocab != smodel.n_vocab:
            raise RuntimeError(f"transformers' vocabulary {target.n_vocab} != specd's "
                               f"{smodel.n_vocab}")
        cuda = device.startswith("cuda")
        print(f"torch_host: transformers {transformers.__version__}, torch "
              f"{torch.__version__}, {device}"
              f"{' (' + torch.cuda.get_device_name(target.device) + ')' if cuda else ''}"
              f", model {str(dtype).replace('torch.', '')}, logits "
              f"{str(logits_dtype).replace('torch.', '')} on {target.block.device.type}"
              f"{' (a side stream)' if target.stream is not None else ''}, rows "
              f"{target.width} wide (vocabulary {target.n_vocab} + {args.pad} -inf); loaded in "
              f"{time.perf_counter() - t0:.1f} s")
        print(f"torch_host: {args.model}, {len(prompts)} prompts, -n {args.n}, seed {args.seed}, "
              f"max draft {args.max_draft}, adaptive {'off' if args.no_adaptive else 'on'}, "
              f"draft model on {args.draft_device}")

        daemon = None
        endpoint = args.verifier
        if endpoint == "auto":
            endpoint, proc, folder = start_verifier(args.verifier_bin, target.n_vocab)
            daemon = (proc, folder)
        if endpoint:
            print(f"torch_host: drafting steps verified by specd-verifier at {endpoint}")
        try:
            return decode_all(specd, target, tok, smodel, args, prompts, stops, endpoint)
        finally:
            if daemon:
                daemon[0].terminate()
                daemon[0].wait(timeout=10)
                shutil.rmtree(daemon[1], ignore_errors=True)


def draft_device(specd, smodel, want):
    """want, when specd's runtime can make a context there; else "cpu" (said on stdout)."""
    if want == "cpu":
        return want
    try:
        with specd.Context(smodel, n_ctx=64, n_batch=8, device=want):
            return want
    except specd.SpecdError as e:
        print(f"torch_host: specd's runtime cannot run the draft model on {want} ({e}); it runs "
              "on the cpu")
        return "cpu"


def make_spec(specd, args, n_vocab, endpoint, policy):
    kw = dict(n_vocab=n_vocab, max_draft=args.max_draft, max_seqs=1, target_path=args.model)
    if endpoint and policy != "none":
        kw.update(verifier_endpoint=endpoint, verifier_tokenizer_hash=TOKENIZER_HASH)
    if policy == "draft":
        kw.update(device=args.draft_device)
    return specd.Spec(**kw)


def decode_all(specd, target, tok, smodel, args, prompts, stops, endpoint):
    ids = [tok.encode_chat(p) for p in prompts]
    all_same = True
    for temp in args.temps:
        # plain decoding once per temperature: the reference and the baseline
        with make_spec(specd, args, target.n_vocab, None, "none") as spec:
            plain = [run_one(specd, target, spec, args, p, "none", None, temp, stops,
                             args.seed + i) for i, p in enumerate(ids)]
        n_plain = sum(len(r[0]) for r in plain)
        s_plain = sum(r[2] for r in plain)
        label = "greedy" if temp == 0 else f"coupled T {temp:g}"
        print(f"plain, {label}: {n_plain} tokens in {s_plain:.2f} s, {n_plain / s_plain:.1f} tok/s")
        # each speculative mode in-process, and with --verifier again through the daemon
        variants = [(m, None) for m in args.modes] + [(m, endpoint) for m in args.modes
                                                      if endpoint]
        for mode, ep in variants:
            name = mode + ("+verifier" if ep else "")
            options = f"model={args.model}" if mode == "draft" else None
            with make_spec(specd, args, target.n_vocab, ep, mode) as spec:
                runs = [run_one(specd, target, spec, args, p, mode, options, temp, stops,
                                args.seed + i) for i, p in enumerate(ids)]
            n_same = 0
            for i, (p, r) in enumerate(zip(plain, runs)):
                d = first_difference(p[0], r[0])
                n_same += d < 0
                st = r[4]
                remote = (f", remote verified {st['n_remote_verified']} steps, in-process "
                          f"fallback {st['n_remote_fallback']}" if ep else "")
                print(f"  [{i + 1}] {name}, {label}: {'identical' if d < 0 else 'DIFFERENT'}, "
                      f"{len(r[0])} tokens, {r[3]} forwards (plain {p[3]}), TPF "
                      f"{len(r[0]) / max(r[3], 1):.2f}, proposals {st['n_draft_tokens']}, "
                      f"accepted {st['n_accepted']}{remote}, plain {len(p[0]) / p[2]:.1f} tok/s, "
                      f"{name} {len(r[0]) / r[2]:.1f} tok/s")
                if d >= 0:
                    explain(tok, target.n_vocab, p[:2], r[:2], d)
            n_tok = sum(len(r[0]) for r in runs)
            s_spec = sum(r[2] for r in runs)
            fw = sum(r[3] for r in runs)
            props = sum(r[4]["n_draft_tokens"] for r in runs)
            acc = sum(r[4]["n_accepted"] for r in runs)
            print(f"summary: {name} {label}: {n_same} of {len(ids)} prompts identical; TPF "
                  f"{n_tok / max(fw, 1):.2f}; acceptance {acc / max(props, 1):.2f} ({acc} of "
                  f"{props} proposals); plain {n_plain / s_plain:.1f} tok/s, {name} "
                  f"{n_tok / s_spec:.1f} tok/s, speedup "
                  f"{(n_tok / s_spec) / (n_plain / s_plain):.2f}x")
            all_same &= n_same == len(ids)
    print(f"torch_host: outputs identical to plain decoding: {'yes' if all_same else 'NO'}")
    return 0 if all_same else 3


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except (RuntimeError, OSError) as e:  # specd.SpecdError is a RuntimeError
        print(f"torch_host: {e}", file=sys.stderr)
        sys.exit(1)
