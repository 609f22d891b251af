#!/usr/bin/python3
"""Independent NumPy reference for the Hugging Face Llama forward pass with an
optional PEFT LoRA adapter, computed in float64 but for the rotary angles,
which are transformers' float32 ones. Written from the semantics of
transformers' modeling_llama.py, modeling_rope_utils.py and PEFT's tuners/lora
(not from Troupe's C++); tests/gpu/oracle_test.cpp compares gpu::cpu_model
against it.

usage: /usr/bin/python3 tests/oracle/llama_numpy.py --model DIR [--adapter DIR]
           --tokens 1,5,9 [--tokens 1,7 ...]
prints {"logits": [...last token of the first prompt...],
        "all_logits": [[...one list per --tokens...]]}
   or: llama_numpy.py --config FILE --inv-freq LEN
prints the model's inv_freq for a pass over LEN positions, one float32 a
line as its bits in hex
"""
import argparse
import json
import math
import os
import re
import struct
import sys

import numpy as np


# -- safetensors -------------------------------------------------------------

def read_safetensors(path):
    """Returns {name: float64 ndarray} for an F32/F16/BF16 safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + header_len].decode("utf-8"))
    data = raw[8 + header_len:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        buf = data[begin:end]
        dt = info["dtype"]
        if dt == "F32":
            arr = np.frombuffer(buf, dtype="<f4").astype(np.float64)
        elif dt == "F16":
            arr = np.frombuffer(buf, dtype="<f2").astype(np.float64)
        elif dt == "BF16":
            bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32).astype(np.float64)
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name}: size does not match shape")
        out[name] = arr.reshape(shape)
    return out


def read_model_tensors(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        tensors = {}
        for name in files:
            tensors.update(read_safetensors(os.path.join(model_dir, name)))
        return tensors
    return read_safetensors(os.path.join(model_dir, "model.safetensors"))


# -- model pieces ------------------------------------------------------------

def rms_norm(x, weight, eps):
    # LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then scaled by weight.
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return weight * (x / np.sqrt(variance + eps))


def silu(x):
    return x / (1.0 + np.exp(-x))


def rotary_dims(cfg, head_dim):
    """The leading elements of each head that turn: Phi-3's attention turns
    int(head_dim * partial_rotary_factor) (Phi-4 mini's 0.75); Llama's all."""
    if cfg.get("model_type") == "phi3":
        return int(head_dim * float(cfg.get("partial_rotary_factor") or 1.0))
    return head_dim


def stated_original(cfg):
    """The config's original_max_position_embeddings as transformers holds
    it: the top-level key, or Phi3Config's default of 4096; else None."""
    if cfg.get("original_max_position_embeddings"):
        return int(cfg["original_max_position_embeddings"])
    return 4096 if cfg.get("model_type") == "phi3" else None


def longrope_original(cfg):
    return stated_original(cfg) or int(cfg.get("max_position_embeddings", 4096))


def yarn_mscale(factor, m=1.0):
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def attention_scaling(cfg):
    """What cos and sin are multiplied by: transformers'
    _compute_longrope_parameters' or _compute_yarn_parameters' attention
    factor, else 1."""
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "yarn":
        if scaling.get("attention_factor") is not None:
            return float(scaling["attention_factor"])
        factor = float(scaling["factor"])
        m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
        if m and m_all:
            return yarn_mscale(factor, m) / yarn_mscale(factor, m_all)
        return yarn_mscale(factor)
    if kind not in ("longrope", "su"):
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    original = longrope_original(cfg)
    if stated_original(cfg):
        factor = float(cfg["max_position_embeddings"]) / original
    else:
        factor = float(scaling.get("factor") or 1.0)
    return 1.0 if factor <= 1.0 else math.sqrt(1.0 + math.log(factor) / math.log(original))


F32 = np.float32


def f32_pow(base, e):
    """torch's float32 pow of a Python scalar base: the base cast to float32,
    the power rounded once to float32."""
    return (F32(base).astype(np.float64) ** e.astype(np.float64)).astype(F32)


def f32_rdiv(scalar, x):
    """`scalar / tensor` in torch: tensor.reciprocal() * scalar (Tensor's
    __rtruediv__), the scalar cast to float32."""
    return (F32(1.0) / x) * F32(scalar)


def inverse_frequencies(cfg, dim, seq_len=1):
    """inv_freq over `dim` rotary elements for a forward pass over `seq_len`
    positions (longrope's factors depend on it), float32 as transformers'
    modeling_rope_utils computes it, one float32 operation at a time (Python
    floats meet float32 tensors as float32)."""
    base = float(cfg.get("rope_theta", 10000.0))
    shape = np.arange(0, dim, 2).astype(F32) / F32(dim)
    power = f32_pow(base, shape)
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in ("longrope", "su"):
        # transformers' longrope: a pass whose sequence is longer than the
        # pretrained context divides by the long factors, else the short.
        which = "long_factor" if seq_len > longrope_original(cfg) else "short_factor"
        ext = np.asarray(scaling[which], dtype=F32)
        if ext.shape != power.shape:
            raise ValueError(f"{which} has {ext.size} entries for {power.size} rotary pairs")
        return f32_rdiv(1.0, ext * power)
    inv_freq = f32_rdiv(1.0, power)
    if kind in (None, "default"):
        return inv_freq
    if kind == "linear":
        # transformers' _compute_linear_scaling_rope_parameters.
        return (inv_freq / F32(scaling["factor"])).astype(F32)
    if kind == "yarn":
        return yarn_frequencies(scaling, inv_freq, power, dim, base,
                                int(cfg.get("max_position_embeddings", 4096)))
    if kind != "llama3":
        raise ValueError(f"unsupported rope_scaling type {kind}")
    # transformers' _compute_llama3_parameters.
    factor = float(scaling["factor"])
    low = float(scaling["low_freq_factor"])
    high = float(scaling["high_freq_factor"])
    old_len = float(scaling["original_max_position_embeddings"])
    low_wavelen = F32(old_len / low)
    high_wavelen = F32(old_len / high)
    wavelen = f32_rdiv(2.0 * math.pi, inv_freq)
    scaled = np.where(wavelen > low_wavelen, inv_freq / F32(factor), inv_freq)
    smooth = (f32_rdiv(old_len, wavelen) - F32(low)) / F32(high - low)
    smoothed = (F32(1.0) - smooth) * scaled / F32(factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(F32)


def yarn_frequencies(scaling, extrapolated, power, dim, base, max_positions):
    """transformers' _compute_yarn_parameters (the pretrained context from
    rope_scaling, else max_position_embeddings; truncate as stated, else
    true), float32 where it meets the tensors."""
    factor = float(scaling["factor"])
    original = scaling.get("original_max_position_embeddings") or max_positions
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2).astype(F32) - F32(low)) / F32(high - low), F32(0), F32(1))
    keep = F32(1) - ramp
    interpolated = f32_rdiv(1.0, F32(factor) * power)
    return (interpolated * (F32(1) - keep) + extrapolated * keep).astype(F32)


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope_angles(positions, inv_freq):
    """[T, len(inv_freq)]: each position times each frequency, the float32
    product transformers' rotary embedding takes (it computes cos and sin of
    it in float32; here in float64)."""
    return np.outer(positions.astype(F32), inv_freq.astype(F32)).astype(F32).astype(np.float64)


def apply_rope(x, positions, inv_freq, scale=1.0):
    # x: [heads, T, head_dim]; the leading 2 * len(inv_freq) elements turn.
    rot = 2 * len(inv_freq)
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    freqs = rope_angles(positions, inv_freq)                      # [T, rot/2]
    emb = np.concatenate([freqs, freqs], axis=-1)                 # [T, rot]
    cos, sin = np.cos(emb) * scale, np.sin(emb) * scale
    return np.concatenate([x_rot * cos[None] + rotate_half(x_rot) * sin[None], x_pass], axis=-1)


# -- PEFT adapter ------------------------------------------------------------

LINEAR_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
FUSED_MODULES = ["qkv_proj", "gate_up_proj"]  # Phi-3's


class Adapter:
    def __init__(self, adapter_dir):
        with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
            cfg = json.load(f)
        if cfg.get("peft_type", "LORA") != "LORA":
            raise ValueError("only LORA adapters are supported")
        if cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
            raise ValueError("rank_pattern/alpha_pattern are not supported")
        if cfg.get("bias", "none") != "none" or cfg.get("fan_in_fan_out", False):
            raise ValueError("bias and fan_in_fan_out are not supported")
        self.r = int(cfg["r"])
        self.alpha = float(cfg.get("lora_alpha", 8))
        if cfg.get("use_rslora", False):
            self.scaling = self.alpha / math.sqrt(self.r)
        else:
            self.scaling = self.alpha / self.r
        self.targets = cfg["target_modules"]
        path = os.path.join(adapter_dir, "adapter_model.safetensors")
        self.tensors = read_safetensors(path)

    def targets_module(self, full_name):
        # PEFT check_target_module_exists: a string is a regex that must
        # fullmatch the module's name (or "all-linear"); a list matches a
        # module whose name equals an entry or ends with "." + entry.
        if isinstance(self.targets, str):
            if self.targets == "all-linear":
                return full_name.rsplit(".", 1)[-1] in LINEAR_MODULES + FUSED_MODULES
            return re.fullmatch(self.targets, full_name) is not None
        return any(full_name == t or full_name.endswith("." + t) for t in self.targets)

    def delta(self, module_name, x):
        """scaling * B(A(x)) for module `module_name` ("model.layers.0.self_attn.q_proj")."""
        if not self.targets_module(module_name):
            return 0.0
        prefix = "base_model.model." + module_name
        a = self.tensors[prefix + ".lora_A.weight"]   # [r, in]
        b = self.tensors[prefix + ".lora_B.weight"]   # [out, r]
        return ((x @ a.T) @ b.T) * self.scaling


# -- forward -----------------------------------------------------------------

class Llama:
    def __init__(self, model_dir, adapter=None):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = json.load(f)
        self.w = read_model_tensors(model_dir)
        self.adapter = adapter
        c = self.cfg
        self.hidden = int(c["hidden_size"])
        self.n_heads = int(c["num_attention_heads"])
        self.n_kv = int(c.get("num_key_value_heads") or self.n_heads)
        self.head_dim = int(c.get("head_dim") or self.hidden // self.n_heads)
        self.n_layers = int(c["num_hidden_layers"])
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.rotary = rotary_dims(c, self.head_dim)
        self.rope_scale = attention_scaling(c)
        # Mistral's and Phi-3's sliding window (Hugging Face's MistralModel
        # and Phi3Model read it in every layer; Llama's architecture has none).
        self.window = c.get("sliding_window") if c.get("model_type") in ("mistral", "phi3") else None
        if c.get("tie_word_embeddings", False) and "lm_head.weight" not in self.w:
            self.lm_head = self.w["model.embed_tokens.weight"]
        else:
            self.lm_head = self.w["lm_head.weight"]

    def linear(self, module_name, x):
        y = x @ self.w[module_name + ".weight"].T
        bias = self.w.get(module_name + ".bias")
        if bias is not None:
            y = y + bias
        if self.adapter is not None:
            y = y + self.adapter.delta(module_name, x)
        return y

    def attention(self, i, x, positions):
        p = f"model.layers.{i}.self_attn."
        t = x.shape[0]
        if p + "qkv_proj.weight" in self.w:
            # Phi-3: one projection whose outputs are q's, then k's and v's.
            qkv = self.linear(p + "qkv_proj", x)
            qd, kd = self.n_heads * self.head_dim, self.n_kv * self.head_dim
            q_out, k_out, v_out = qkv[:, :qd], qkv[:, qd:qd + kd], qkv[:, qd + kd:]
        else:
            q_out, k_out = self.linear(p + "q_proj", x), self.linear(p + "k_proj", x)
            v_out = self.linear(p + "v_proj", x)
        q = q_out.reshape(t, self.n_heads, self.head_dim)
        k = k_out.reshape(t, self.n_kv, self.head_dim)
        # Qwen3: each head of q and k RMS-normalised before the rotation.
        if p + "q_norm.weight" in self.w:
            q = rms_norm(q, self.w[p + "q_norm.weight"], self.eps)
            k = rms_norm(k, self.w[p + "k_norm.weight"], self.eps)
        q = q.transpose(1, 0, 2)
        k = k.transpose(1, 0, 2)
        v = v_out.reshape(t, self.n_kv, self.head_dim).transpose(1, 0, 2)
        q = apply_rope(q, positions, self.inv_freq, self.rope_scale)
        k = apply_rope(k, positions, self.inv_freq, self.rope_scale)
        # repeat_kv: query head h reads key/value head h // (heads / kv_heads).
        rep = self.n_heads // self.n_kv
        k = np.repeat(k, rep, axis=0)
        v = np.repeat(v, rep, axis=0)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(self.head_dim)   # [H, T, T]
        mask = np.triu(np.ones((t, t), dtype=bool), k=1)
        if self.window:
            # Query i sees key j where i - window < j <= i.
            mask |= np.tril(np.ones((t, t), dtype=bool), k=-int(self.window))
        scores = np.where(mask[None], -np.inf, scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs = probs / probs.sum(axis=-1, keepdims=True)
        out = (probs @ v).transpose(1, 0, 2).reshape(t, self.n_heads * self.head_dim)
        return self.linear(p + "o_proj", out)

    def mlp(self, i, x):
        p = f"model.layers.{i}.mlp."
        if p + "gate_up_proj.weight" in self.w:
            # Phi-3: gate's outputs, then up's, from one projection.
            gate, up = np.split(self.linear(p + "gate_up_proj", x), 2, axis=-1)
            return self.linear(p + "down_proj", silu(gate) * up)
        return self.linear(p + "down_proj",
                           silu(self.linear(p + "gate_proj", x)) * self.linear(p + "up_proj", x))

    def last_logits(self, tokens):
        ids = np.asarray(tokens, dtype=np.int64)
        h = self.w["model.embed_tokens.weight"][ids]
        positions = np.arange(len(tokens))
        self.inv_freq = inverse_frequencies(self.cfg, self.rotary, len(tokens))
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            h = h + self.attention(i, rms_norm(h, self.w[p + "input_layernorm.weight"], self.eps),
                                   positions)
            h = h + self.mlp(i, rms_norm(h, self.w[p + "post_attention_layernorm.weight"],
                                         self.eps))
        h = rms_norm(h, self.w["model.norm.weight"], self.eps)
        return self.lm_head @ h[-1]


def print_inv_freq(config_path, seq_len):
    with open(config_path, encoding="utf-8") as f:
        cfg = json.load(f)
    n_heads = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // n_heads)
    inv = inverse_frequencies(cfg, rotary_dims(cfg, head_dim), seq_len).astype(F32)
    for bits in inv.view(np.uint32):
        print(f"{int(bits):08x}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--adapter")
    ap.add_argument("--tokens", action="append",
                    help="comma-separated token ids; repeat for more prompts")
    ap.add_argument("--config", help="with --inv-freq: a config.json")
    ap.add_argument("--inv-freq", type=int, metavar="LEN",
                    help="print the config's inv_freq for a pass over LEN positions")
    args = ap.parse_args()
    if args.inv_freq is not None:
        if not args.config:
            ap.error("--inv-freq needs --config")
        try:
            print_inv_freq(args.config, args.inv_freq)
        except (OSError, ValueError, KeyError) as e:
            print(f"llama_numpy.py: error: {e!r}", file=sys.stderr)
            return 1
        return 0
    if not args.model or not args.tokens:
        ap.error("--model and --tokens are required")
    try:
        adapter = Adapter(args.adapter) if args.adapter else None
        model = Llama(args.model, adapter)
        prompts = [[int(t) for t in s.split(",") if t.strip()] for s in args.tokens]
        vocab = model.lm_head.shape[0]
        for p in prompts:
            if not p or min(p) < 0 or max(p) >= vocab:
                raise ValueError(f"bad prompt {p} for vocab {vocab}")
        logits = [model.last_logits(p).tolist() for p in prompts]
    except (OSError, ValueError, KeyError) as e:
        print(f"llama_numpy.py: error: {e!r}", file=sys.stderr)
        return 1
    json.dump({"logits": logits[0], "all_logits": logits}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
