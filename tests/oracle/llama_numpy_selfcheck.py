#!/usr/bin/python3
"""Self-checks of llama_numpy.py against facts that hold for any correct Llama:
a one-token prompt's attention is o(v(x)); RoPE equals complex rotation of
(first half, second half) pairs; GQA equals MHA with duplicated K/V heads;
an adapter equals merging scale*B@A into the weights; tied equals an explicit
lm_head copy; BF16 files read back what was written; a sliding window is a
cut prompt; Phi-3's fused projections are the separate ones; partial rotary
embeddings turn the leading pairs only; LongRoPE's factors are plain and
theta-scaled frequencies, its attention factor scaled q and k weights. Run:
/usr/bin/python3 tests/oracle/llama_numpy_selfcheck.py  (prints OK or fails)
"""
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_numpy as ln  # noqa: E402


def write_st(path, tensors, dtype="F32"):
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr, dtype=np.float32)
        if dtype == "BF16":
            b = (a.view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            b = a.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_model(d, cfg, w, dtype="F32"):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    write_st(os.path.join(d, "model.safetensors"), w, dtype)


def random_weights(rng, cfg, kv):
    hd = cfg["hidden_size"] // cfg["num_attention_heads"]
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    w = {"model.embed_tokens.weight": rng.normal(size=(V, H)),
         "model.norm.weight": 1 + 0.1 * rng.normal(size=H),
         "lm_head.weight": rng.normal(size=(V, H)) * 0.2}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + 0.1 * rng.normal(size=H)
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.normal(size=H)
        w[p + "self_attn.q_proj.weight"] = rng.normal(size=(cfg["num_attention_heads"] * hd, H)) * 0.2
        w[p + "self_attn.k_proj.weight"] = rng.normal(size=(kv * hd, H)) * 0.2
        w[p + "self_attn.v_proj.weight"] = rng.normal(size=(kv * hd, H)) * 0.2
        w[p + "self_attn.o_proj.weight"] = rng.normal(size=(H, cfg["num_attention_heads"] * hd)) * 0.2
        w[p + "mlp.gate_proj.weight"] = rng.normal(size=(I, H)) * 0.2
        w[p + "mlp.up_proj.weight"] = rng.normal(size=(I, H)) * 0.2
        w[p + "mlp.down_proj.weight"] = rng.normal(size=(H, I)) * 0.2
    return {k: v.astype(np.float32) for k, v in w.items()}


def close(a, b, tol=1e-9):
    a, b = np.asarray(a), np.asarray(b)
    return np.max(np.abs(a - b)) <= tol * max(1.0, np.max(np.abs(b)))


def main():
    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp(prefix="oracle_selfcheck_")
    cfg = {"hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 11,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}
    w = random_weights(rng, cfg, 2)
    base = os.path.join(tmp, "base")
    make_model(base, cfg, w)
    m = ln.Llama(base)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]

    # 1. one token: attention reduces to o_proj(v_proj(x)), no RoPE effect.
    one = dict(cfg, num_hidden_layers=1)
    d1 = os.path.join(tmp, "one")
    make_model(d1, one, w)
    m1 = ln.Llama(d1)
    W = {k: v.astype(np.float64) for k, v in w.items()}
    x = W["model.embed_tokens.weight"][7]
    p = "model.layers.0."
    xn = x / np.sqrt(np.mean(x * x) + 1e-5) * W[p + "input_layernorm.weight"]
    vv = W[p + "self_attn.v_proj.weight"] @ xn
    vv = np.concatenate([np.tile(vv[h * 4:(h + 1) * 4], 2) for h in range(2)])  # heads 0,1 <- kv0
    h1 = x + W[p + "self_attn.o_proj.weight"] @ vv
    hn = h1 / np.sqrt(np.mean(h1 * h1) + 1e-5) * W[p + "post_attention_layernorm.weight"]
    g = W[p + "mlp.gate_proj.weight"] @ hn
    u = W[p + "mlp.up_proj.weight"] @ hn
    h2 = h1 + W[p + "mlp.down_proj.weight"] @ (g / (1 + np.exp(-g)) * u)
    hf = h2 / np.sqrt(np.mean(h2 * h2) + 1e-5) * W["model.norm.weight"]
    assert close(m1.last_logits([7]), W["lm_head.weight"] @ hf), "one-token forward"

    # 2. RoPE as complex rotation of (x[j], x[j + hd/2]) by pos * inv_freq[j]
    # (the float32 product, as transformers takes it).
    hd = 8
    xs = rng.normal(size=(1, 5, hd))
    inv = ln.inverse_frequencies({"rope_theta": 500.0}, hd)
    got = ln.apply_rope(xs, np.arange(5), inv)
    z = (xs[..., :4] + 1j * xs[..., 4:]) * np.exp(1j * np.outer(np.arange(5, dtype=np.float32), inv).astype(np.float64))[None]
    assert close(got, np.concatenate([z.real, z.imag], axis=-1)), "rope"
    # llama3 scaling: high frequencies kept, low ones divided by factor.
    l3 = {"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}}
    plain = ln.inverse_frequencies({"rope_theta": 500000.0}, 64)
    scaled = ln.inverse_frequencies(l3, 64)
    assert scaled[0] == plain[0] and close(scaled[-1], plain[-1] / 8.0), "llama3 rope"
    # linear: every frequency divided by factor.
    assert close(ln.inverse_frequencies({"rope_theta": 500000.0, "rope_scaling": {"type": "linear", "factor": 4.0}},
                                        64), plain / 4.0), "linear rope"
    # yarn, by the paper: a pair turning over 32 times over the pretrained
    # 4,096 positions kept, under once divided by factor, blended between; cos
    # and sin times 0.1 ln(factor) + 1.
    yarn = {"rope_theta": 500000.0, "max_position_embeddings": 4096,
            "rope_scaling": {"type": "yarn", "factor": 8.0}}
    ys = ln.inverse_frequencies(yarn, 64)
    turns = 4096 * plain / (2 * math.pi)
    assert (ys[turns > 48] == plain[turns > 48]).all() and (turns > 48).any(), "yarn keeps fast pairs"
    assert close(ys[turns < 0.6], plain[turns < 0.6] / 8.0) and (turns < 0.6).any(), "yarn divides slow pairs"
    assert ((ys <= plain * (1 + 1e-6)) & (ys >= plain / 8.0 * (1 - 1e-6))).all(), "yarn blends between"
    assert close(ln.attention_scaling(yarn), 0.1 * math.log(8.0) + 1.0), "yarn attention factor"

    # 3. GQA == MHA with K/V heads duplicated (head h reads kv head h // 2).
    mha_cfg = dict(cfg, num_key_value_heads=4)
    wm = dict(w)
    for i in range(2):
        for n in ("k_proj", "v_proj"):
            key = f"model.layers.{i}.self_attn.{n}.weight"
            blocks = w[key].reshape(2, 4, 16)
            wm[key] = np.repeat(blocks, 2, axis=0).reshape(16, 16)
    dm = os.path.join(tmp, "mha")
    make_model(dm, mha_cfg, wm)
    assert close(m.last_logits(prompt), ln.Llama(dm).last_logits(prompt)), "gqa"

    # 4. adapter == merged weights, plain and rsLoRA, list and all-linear targets.
    for rs, targets in ((False, ["q_proj", "v_proj"]), (True, "all-linear"),
                        (False, ["o_proj", "down_proj"])):
        r, alpha = 4, 8.0
        ad = {}
        merged = dict(w)
        for i in range(2):
            for mod in ln.LINEAR_MODULES:
                if targets != "all-linear" and mod not in targets:
                    continue
                sub = "self_attn" if mod in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
                name = f"model.layers.{i}.{sub}.{mod}"
                out_f, in_f = w[name + ".weight"].shape
                a = (rng.normal(size=(r, in_f)) * 0.3).astype(np.float32)
                b = (rng.normal(size=(out_f, r)) * 0.3).astype(np.float32)
                ad[f"base_model.model.{name}.lora_A.weight"] = a
                ad[f"base_model.model.{name}.lora_B.weight"] = b
                scale = alpha / (math.sqrt(r) if rs else r)
                merged[name + ".weight"] = (w[name + ".weight"].astype(np.float64)
                                            + scale * b.astype(np.float64) @ a.astype(np.float64))
        add = os.path.join(tmp, f"ad{int(rs)}")
        os.makedirs(add, exist_ok=True)
        with open(os.path.join(add, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "r": r, "lora_alpha": alpha, "use_rslora": rs,
                       "target_modules": targets}, f)
        write_st(os.path.join(add, "adapter_model.safetensors"), ad)
        ours = ln.Llama(base, ln.Adapter(add)).last_logits(prompt)
        W2 = {k: np.asarray(v, dtype=np.float64) for k, v in merged.items()}
        mm = ln.Llama(base)
        mm.w = W2
        mm.lm_head = W2["lm_head.weight"]
        assert close(ours, mm.last_logits(prompt), 1e-8), f"lora rs={rs} {targets}"
        assert not close(ours, m.last_logits(prompt), 1e-3), "adapter has no effect"

    # 5. tied embeddings == explicit lm_head equal to the embedding.
    tied = dict(cfg, tie_word_embeddings=True)
    wt = {k: v for k, v in w.items() if k != "lm_head.weight"}
    dt = os.path.join(tmp, "tied")
    make_model(dt, tied, wt)
    we = dict(w, **{"lm_head.weight": w["model.embed_tokens.weight"]})
    de = os.path.join(tmp, "untied")
    make_model(de, cfg, we)
    assert close(ln.Llama(dt).last_logits(prompt), ln.Llama(de).last_logits(prompt)), "tied"

    # 6. BF16 storage reads back bf16-rounded values.
    db = os.path.join(tmp, "bf16")
    make_model(db, cfg, w, "BF16")
    got = ln.read_safetensors(os.path.join(db, "model.safetensors"))["model.norm.weight"]
    want = (w["model.norm.weight"].view(np.uint32) & 0xFFFF0000).view(np.float32)
    assert close(got, want.astype(np.float64), 0), "bf16"

    # 7. causality: appending tokens does not change earlier positions' logits
    # (checked through prefixes: last logits of prompt[:k] are unaffected by later ones).
    full = [m.last_logits(prompt[:k]) for k in range(1, len(prompt) + 1)]
    assert all(np.all(np.isfinite(f)) for f in full)

    # 8. Mistral's sliding window. One layer: the last token sees the last
    # `window` tokens only, and rotary embeddings are relative, so its
    # logits are those of the same prompt cut to them (positions from 0) with
    # no window; a window as long as the prompt changes nothing.
    slid = os.path.join(tmp, "slid")
    make_model(slid, dict(one, model_type="mistral", sliding_window=3), w)
    assert close(ln.Llama(slid).last_logits(prompt), m1.last_logits(prompt[-3:]), 1e-7), "sliding window"
    assert not close(m1.last_logits(prompt), m1.last_logits(prompt[-3:]), 1e-3), "window has no effect"
    whole = os.path.join(tmp, "whole")
    make_model(whole, dict(cfg, model_type="mistral", sliding_window=len(prompt)), w)
    assert close(ln.Llama(whole).last_logits(prompt), m.last_logits(prompt)), "window over the whole prompt"

    # 9. Phi-3's fused projections: qkv_proj's rows q's, k's, v's and
    # gate_up_proj's gate's, up's; a fused adapter is one A over the part's
    # rows of B. Both equal the separate model and adapters.
    fw = {k: v for k, v in w.items() if not any(n in k for n in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"))}
    fad, sad = {}, {}
    for i in range(2):
        a_, m_ = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        fw[a_ + "qkv_proj.weight"] = np.concatenate([w[a_ + n + ".weight"] for n in ("q_proj", "k_proj", "v_proj")])
        fw[m_ + "gate_up_proj.weight"] = np.concatenate([w[m_ + n + ".weight"] for n in ("gate_proj", "up_proj")])
        for fused, parts in ((a_ + "qkv_proj", [a_ + "q_proj", a_ + "k_proj", a_ + "v_proj"]),
                             (m_ + "gate_up_proj", [m_ + "gate_proj", m_ + "up_proj"])):
            a = (rng.normal(size=(4, 16)) * 0.3).astype(np.float32)
            bs = [(rng.normal(size=(w[n + ".weight"].shape[0], 4)) * 0.3).astype(np.float32) for n in parts]
            fad[f"base_model.model.{fused}.lora_A.weight"] = a
            fad[f"base_model.model.{fused}.lora_B.weight"] = np.concatenate(bs)
            for n, b in zip(parts, bs):
                sad[f"base_model.model.{n}.lora_A.weight"] = a
                sad[f"base_model.model.{n}.lora_B.weight"] = b
    dphi = os.path.join(tmp, "phi3")
    make_model(dphi, dict(cfg, model_type="phi3"), fw)
    for name, tensors, targets in (("fused", fad, ["qkv_proj", "gate_up_proj"]),
                                   ("separate", sad, ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"])):
        d = os.path.join(tmp, "ad_" + name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": targets}, f)
        write_st(os.path.join(d, "adapter_model.safetensors"), tensors)
    assert close(ln.Llama(dphi).last_logits(prompt), m.last_logits(prompt)), "phi3 fused projections"
    fused_out = ln.Llama(dphi, ln.Adapter(os.path.join(tmp, "ad_fused"))).last_logits(prompt)
    assert close(fused_out, ln.Llama(base, ln.Adapter(os.path.join(tmp, "ad_separate"))).last_logits(prompt)), \
        "phi3 fused adapter"
    assert not close(fused_out, m.last_logits(prompt), 1e-3), "fused adapter has no effect"

    # 10. Partial rotary embeddings: the leading pairs turn as complex
    # numbers, the rest of the head stays; a factor of 1 is the whole head.
    xs = rng.normal(size=(2, 5, 8))
    inv = ln.inverse_frequencies({"rope_theta": 500.0}, 6)
    got = ln.apply_rope(xs, np.arange(5), inv, 1.5)
    z = (xs[..., :3] + 1j * xs[..., 3:6]) * 1.5 * np.exp(1j * np.outer(np.arange(5, dtype=np.float32), inv).astype(np.float64))[None]
    assert close(got, np.concatenate([z.real, z.imag, xs[..., 6:]], axis=-1)), "partial rope"
    assert ln.rotary_dims({"model_type": "phi3", "partial_rotary_factor": 0.75}, 128) == 96
    assert ln.rotary_dims({"model_type": "llama", "partial_rotary_factor": 0.75}, 128) == 128
    assert close(ln.Llama(dphi).last_logits(prompt), m.last_logits(prompt)), "partial rotary factor 1"
    dpart = os.path.join(tmp, "phi3_part")
    make_model(dpart, dict(cfg, model_type="phi3", partial_rotary_factor=0.5), fw)
    assert not close(ln.Llama(dpart).last_logits(prompt), m.last_logits(prompt), 1e-3), "partial rotary has no effect"
    # LongRoPE over a pretrained context of 4. Short factors of 1 are plain
    # frequencies; long factors k^(2i/d) are theta * k's; the attention
    # factor s on cos and sin is q's and k's weights times s (one layer, the
    # whole head turning). A pass over 4 tokens takes the short, over 5 the long.
    hd, k_ = 4, 7.0
    lr = dict(one, max_position_embeddings=16, original_max_position_embeddings=4,
              rope_scaling={"type": "longrope", "short_factor": [1.0] * (hd // 2),
                            "long_factor": [k_ ** (2 * i / hd) for i in range(hd // 2)],
                            "attention_factor": 1.3})
    dlr = os.path.join(tmp, "longrope")
    make_model(dlr, lr, w)
    ws = dict(w)
    for n in ("q_proj", "k_proj"):
        ws[f"model.layers.0.self_attn.{n}.weight"] = w[f"model.layers.0.self_attn.{n}.weight"] * np.float32(1.3)
    dplain = os.path.join(tmp, "longrope_plain")
    make_model(dplain, one, ws)
    dtheta = os.path.join(tmp, "longrope_theta")
    make_model(dtheta, dict(one, rope_theta=10000.0 * k_), ws)
    assert close(ln.Llama(dlr).last_logits(prompt[:4]), ln.Llama(dplain).last_logits(prompt[:4]), 1e-6), \
        "longrope short factors"
    assert close(ln.Llama(dlr).last_logits(prompt[:5]), ln.Llama(dtheta).last_logits(prompt[:5]), 1e-6), \
        "longrope long factors"
    assert not close(ln.Llama(dplain).last_logits(prompt[:5]), ln.Llama(dtheta).last_logits(prompt[:5]), 1e-3), \
        "long factors have no effect"
    # Hugging Face's attention factor: sqrt(1 + ln(16 / 4) / ln(4)).
    computed = dict(lr, rope_scaling=dict(lr["rope_scaling"], attention_factor=None))
    assert close(ln.attention_scaling(computed), math.sqrt(2.0)), "longrope attention factor"
    # 11. transformers' inv_freq is float32 step by step: within a few ulps
    # of the exact 1 / theta^(2i/d), but not its rounding everywhere (the
    # exponent 2i/d is rounded first); the angle at a long position moves.
    for theta, d in ((10000.0, 128), (1e6, 128), (10000.0, 96)):
        got = ln.inverse_frequencies({"rope_theta": theta}, d)
        exact = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
        assert got.dtype == np.float32, "inv_freq dtype"
        ulps = np.abs(got.view(np.int32).astype(np.int64) - exact.astype(np.float32).view(np.int32))
        assert ulps.max() <= 8 and ulps.max() >= 1, f"inv_freq ulps {ulps.max()} for theta {theta}, dim {d}"
        assert got[0] == 1.0, "inv_freq[0]"
    print("OK")


if __name__ == "__main__":
    main()
