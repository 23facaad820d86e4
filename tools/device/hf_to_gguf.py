#!/usr/bin/env python3
"""hf_to_gguf.py — converts a Llama checkpoint in Hugging Face layout (what `plumb synth` writes:
config.json, BF16 safetensors, tokenizer.json) into the BF16 GGUF that llama.cpp's own
`convert_hf_to_gguf.py --outtype bf16` writes, with the Python standard library only, for machines
that have no numpy, torch or transformers (the GPU machine).

    python3 tools/device/hf_to_gguf.py MODEL_DIR OUT.gguf [--pre NAME]

The file is byte for byte the official converter's (llama-cpp-python==0.3.36, run as
tools/fixtures/convert_gguf.py does, with `--pre llama-bpe`: it does not know the synthetic
tokenizer's hash) on plumb synth's llama-3.1-8b (1 layer, one file and sharded), llama-3.2-1b
(tied head, 16 layers) and tiny-llama. general.name is the folder's name title-cased, without the
official name heuristics. It refuses what it does not handle: SentencePiece tokenizers, weights
other than BF16, other architectures and RoPE scalings other than llama3. Nothing is held in memory but one q/k projection or norm at a time: other tensors
are copied file to file by the kernel (copy_file_range). q_proj/k_proj rows are reordered as
llama.cpp's converter does (Hugging Face's rotate-half RoPE layout to GGUF's interleaved one);
norms are stored F32.
"""
import argparse, json, math, os, re, struct, sys, time

ALIGN = 32  # GGUF's default general.alignment
GGML_F32, GGML_BF16 = 0, 30
FTYPE_MOSTLY_BF16 = 32
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9  # gguf_type of metadata values
PACK = {U32: "I", I32: "i", F32: "f", BOOL: "?"}
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5  # llama_token_type

# The pre-tokenizers llama.cpp names in tokenizer.ggml.pre, by the Split regex of tokenizer.json.
PRE = {r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe"}
TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
LAYER = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
         "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down"}
SPECIAL_IDS = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id",
               "sep": "seperator_token_id", "pad": "padding_token_id", "mask": "mask_token_id"}


def fail(msg):
    sys.exit(f"hf_to_gguf: {msg}")


def load(path, default=None):
    if default is not None and not os.path.exists(path):
        return default
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def gguf_name(hf):
    stem, _, suffix = hf.rpartition(".")
    if stem in TOP:
        return f"{TOP[stem]}.{suffix}"
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", stem)
    if not m or m[2] not in LAYER:
        fail(f"no GGUF name for tensor {hf}")
    return f"blk.{m[1]}.{LAYER[m[2]]}.{suffix}"


def safetensors(model_dir):
    """[(name, dtype, shape, path, offset, nbytes)] in the official converter's order: part files
    sorted, names sorted within a part."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        parts = sorted(set(load(index)["weight_map"].values()))
    else:
        parts = sorted(f for f in os.listdir(model_dir) if f.startswith("model") and f.endswith(".safetensors"))
    if not parts:
        fail(f"no model*.safetensors in {model_dir}")
    out = []
    for part in parts:
        path = os.path.join(model_dir, part)
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        for name in sorted(header):
            t = header[name]
            begin, end = t["data_offsets"]
            out.append((name, t["dtype"], t["shape"], path, 8 + n + begin, end - begin))
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def llama3_rope_factors(rope, base, dim):
    """rope_freqs.weight as the official converter computes it in torch float32 (each step rounded
    to float32; `a / tensor` is torch's reciprocal-then-multiply)."""
    factor, lo, hi = rope.get("factor", 8.0), rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    old = rope.get("original_max_position_embeddings", 8192)
    out = []
    for i in range(0, dim, 2):
        freq = f32(1.0 / f32(f32(base) ** f32(i / dim)))
        wavelen = f32(f32(1.0 / freq) * f32(2 * math.pi))
        if wavelen < old / hi:
            out.append(1.0)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = f32(f32(f32(f32(1.0 / wavelen) * old) - lo) / f32(hi - lo))
            out.append(f32(1.0 / f32(f32(f32(1 - smooth) / factor) + smooth)))
    return struct.pack(f"<{len(out)}f", *out)


def tokenizer(model_dir, config, pre):
    """The tokenizer.* metadata, as the official converter's gpt2 vocab and gguf.SpecialVocab write
    it for Llama-3-style tokenizers."""
    if os.path.exists(os.path.join(model_dir, "tokenizer.model")):
        fail("SentencePiece tokenizers are not handled; use llama.cpp's convert_hf_to_gguf.py")
    tok = load(os.path.join(model_dir, "tokenizer.json"))
    cfg = load(os.path.join(model_dir, "tokenizer_config.json"), {})
    model = tok["model"]
    if model["type"] != "BPE":
        fail(f"tokenizer model {model['type']} is not handled (only byte-level BPE)")
    if pre is None:
        pts = tok.get("pre_tokenizer") or {}
        for p in pts.get("pretokenizers", [pts]):
            if p.get("type") == "Split":
                pre = PRE.get(p["pattern"].get("Regex"))
        if pre is None:
            fail("unknown pre-tokenizer regex; name llama.cpp's pre-tokenizer with --pre")

    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    for i, a in cfg.get("added_tokens_decoder", {}).items():
        added[int(i)] = {**added.get(int(i), {}), **a}
    id_to_token = {i: t for t, i in model["vocab"].items()}
    id_to_token.update({i: a["content"] for i, a in added.items()})
    n_vocab = config["vocab_size"]
    if max(id_to_token) >= n_vocab:
        fail(f"token id {max(id_to_token)} is past vocab_size {n_vocab}")
    tokens, types = [], []
    for i in range(n_vocab):
        t, kind = id_to_token.get(i), NORMAL
        if t is None:
            t, kind = f"[PAD{i}]", UNUSED
        elif i in added and (added[i].get("special") or looks_special(t)):
            kind = CONTROL
        elif i in added:
            t, kind = t.replace("\u2581", " "), USER_DEFINED  # llama.cpp expects user-defined tokens pre-normalized
        tokens.append(t)
        types.append(kind)
    # merges: new-style [a, b] pairs are joined with a space, spaces inside them written as U+0120
    merges = [m if isinstance(m, str) else " ".join(p.replace(" ", "\u0120") for p in m) for m in model["merges"]]

    ids, add = special_tokens(tok, cfg, config, added)
    kvs = []
    if (v := cfg.get("add_prefix_space")) is not None:
        kvs.append(("tokenizer.ggml.add_space_prefix", BOOL, v))
    kvs += [("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.pre", STR, pre),
            ("tokenizer.ggml.tokens", ARR, (STR, tokens)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
            ("tokenizer.ggml.merges", ARR, (STR, merges))]
    kvs += [(f"tokenizer.ggml.{SPECIAL_IDS[k]}", U32, v) for k, v in ids.items() if k in SPECIAL_IDS]
    kvs += [(f"tokenizer.ggml.add_{k}_token", BOOL, v) for k, v in add.items() if k in ("bos", "eos", "sep")]
    if cfg:
        template = cfg.get("chat_template")
        jinja = os.path.join(model_dir, "chat_template.jinja")
        if template is None and os.path.exists(jinja):
            template = open(jinja, encoding="utf-8").read()
        if template is None:
            template = load(os.path.join(model_dir, "chat_template.json"), {}).get("chat_template")
        if isinstance(template, str):
            kvs.append(("tokenizer.chat_template", STR, template))
        elif template is not None:
            fail("named chat templates are not handled")
    return kvs


def looks_special(t):
    """Added tokens that llama.cpp's converter makes CONTROL even when not marked special."""
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or t.startswith("<|") and t.endswith("|>")
            or t.startswith("<\uff5c") and t.endswith("\uff5c>") or t.startswith("<unused") and t.endswith(">"))


def special_tokens(tok, cfg, config, added):
    """Special token ids and add_*_token flags: the tokenizer.json post-processor first, then
    tokenizer_config.json, then config.json's *_token_id (the first source that names one wins)."""
    def content(v):
        return v.get("content") if isinstance(v, dict) else v

    def special(entry):
        return entry.get("SpecialToken", {}).get("id")

    types = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
    by_content = {a["content"]: i for i, a in sorted(added.items())}
    names = {typ: content(cfg.get(f"{typ}_token")) for typ in types}
    ids, add = {}, {}
    post = tok.get("post_processor") or {}
    for p in post.get("processors", [post]) if post else []:
        if p["type"] == "ByteLevel":
            add.setdefault("bos", False)
            add.setdefault("eos", False)
        elif p["type"] == "TemplateProcessing":
            single, pair = p.get("single", []), p.get("pair", [])
            first = special(single[0]) if len(single) > 1 else None
            last = special(single[-1]) if len(single) > 1 else None
            if first:
                names["bos"] = names["bos"] or first
                add["bos"] = first in (names["bos"], names["cls"])
            if last:
                add["eos"] = last == names["eos"]
            # pair [first] A <middle> B [last]: a separator is added when the middle names sep or eos
            middle = pair[1 if first else 0:len(pair) - 1 if last else None][1:-1]
            if middle:
                mid = [special(m) for m in middle[:2]]
                ends = (names["sep"], names["eos"])
                add["sep"] = (mid[0] in ends and not last) or (len(mid) == 2 and mid[1] in ends)
        else:
            fail(f"post-processor {p['type']} is not handled")
    if cfg:
        for typ in types:
            if isinstance(flag := cfg.get(f"add_{typ}_token"), bool):
                add.setdefault(typ, flag)
            if names[typ] in by_content:
                ids.setdefault(typ, by_content[names[typ]])
    for typ in types:
        if isinstance(v := config.get(f"{typ}_token_id"), int):
            ids.setdefault(typ, v)
    return ids, add


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, value):
    if vtype == STR:
        return gguf_str(value)
    if vtype == ARR:
        sub, items = value
        head = struct.pack("<IQ", sub, len(items))
        if sub == STR:
            return head + b"".join(gguf_str(s) for s in items)
        return head + struct.pack(f"<{len(items)}{PACK[sub]}", *items)
    return struct.pack("<" + PACK[vtype], value)


def title(name):
    """general.name from the folder's name, as gguf.Metadata titles a plain model id."""
    words = name.strip().replace("-", " ").split()
    return " ".join(w.title() if w.islower() and not re.match(r"^(v\d+(?:\.\d+)*|\d.*)$", w) else w for w in words)


def size_label(n):
    """general.size_label: the parameter count rounded as gguf.utility does (8.0B, 1.2B)."""
    for limit, scale, suffix in ((1e12, 1e-12, "T"), (1e9, 1e-9, "B"), (1e6, 1e-6, "M"), (-1, 1e-3, "K")):
        if n > limit:
            x = n * scale
            break
    digits = max(2 - len(str(round(x)).lstrip("0")), 0)
    return f"{x:.{digits}f}{suffix}"


def plan(model_dir):
    """The metadata and the tensors to write: [(name, ggml_type, shape, nbytes, source)], a source
    being bytes or (path, offset, nbytes, src_dtype, permute_heads or 0)."""
    config = load(os.path.join(model_dir, "config.json"))
    arch = (config.get("architectures") or ["?"])[0]
    if arch != "LlamaForCausalLM":
        fail(f"architecture {arch} is not handled (LlamaForCausalLM only)")
    n_head, n_kv = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or config["hidden_size"] // n_head
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type"))
    rope_theta = rope.get("rope_theta", config.get("rope_theta"))

    tensors = []
    if rope_type == "llama3":
        data = llama3_rope_factors(rope, rope_theta if rope_theta is not None else 10000.0, head_dim)
        tensors.append(("rope_freqs.weight", GGML_F32, [head_dim // 2], len(data), data))
    for name, dtype, shape, path, offset, nbytes in safetensors(model_dir):
        if name.endswith("rotary_emb.inv_freq"):
            continue
        out = gguf_name(name)
        if dtype not in ("BF16", "F32") or dtype == "F32" and len(shape) > 1:
            fail(f"{name} is {dtype}; only BF16 weights (and F32 norms) are handled")
        heads = n_head if ".attn_q." in out else n_kv if ".attn_k." in out else 0
        if len(shape) == 1 or out.endswith("_norm.weight"):
            size = math.prod(shape) * 4
            tensors.append((out, GGML_F32, shape, size, (path, offset, nbytes, dtype, heads)))
        else:
            tensors.append((out, GGML_BF16, shape, nbytes, (path, offset, nbytes, dtype, heads)))

    n_params = sum(math.prod(t[2]) for t in tensors)
    kvs = [("general.architecture", STR, "llama"), ("general.type", STR, "model"),
           ("general.name", STR, title(os.path.basename(os.path.abspath(model_dir)))),
           ("general.size_label", STR, size_label(n_params)),
           ("llama.block_count", U32, config["num_hidden_layers"])]
    ctx = next((config[k] for k in ("max_position_embeddings", "n_ctx", "n_positions") if k in config), None)
    if ctx is not None:
        kvs.append(("llama.context_length", U32, ctx))
    kvs += [("llama.embedding_length", U32, config["hidden_size"]),
            ("llama.feed_forward_length", U32, config["intermediate_size"]),
            ("llama.attention.head_count", U32, n_head), ("llama.attention.head_count_kv", U32, n_kv)]
    if rope_type not in (None, "default", "llama3"):
        fail(f"rope_type {rope_type} is not handled")
    if rope_theta is not None:
        kvs.append(("llama.rope.freq_base", F32, rope_theta))
    kvs += [("llama.attention.layer_norm_rms_epsilon", F32, config["rms_norm_eps"]),
            # transformers' LlamaConfig always carries head_dim, so the official converter writes these
            ("llama.attention.key_length", U32, head_dim), ("llama.attention.value_length", U32, head_dim),
            ("general.file_type", U32, FTYPE_MOSTLY_BF16), ("llama.vocab_size", U32, config["vocab_size"]),
            ("llama.rope.dimension_count", U32, head_dim), ("general.quantization_version", U32, 2)]
    return config, kvs, tensors


def rows_interleaved(data, heads, row_bytes):
    """q/k rows per head from rotate-half order (first halves, then second halves of each pair) to
    interleaved order: out row 2i + j of a head is its in row j * half + i."""
    mv, out = memoryview(data), bytearray(len(data))
    rows = len(data) // row_bytes
    head_rows = rows // heads
    half = head_rows // 2
    dst = 0
    for h in range(heads):
        for i in range(half):
            for j in (0, 1):
                src = (h * head_rows + j * half + i) * row_bytes
                out[dst:dst + row_bytes] = mv[src:src + row_bytes]
                dst += row_bytes
    return out


def bf16_to_f32(data):
    """Exact: a bf16 is the high half of the f32 with the same value (little-endian bytes 2, 3)."""
    out = bytearray(len(data) * 2)
    out[2::4], out[3::4] = data[0::2], data[1::2]
    return out


def pread_all(fd, n, offset):
    buf = bytearray(n)
    mv, done = memoryview(buf), 0
    while done < n:
        k = os.preadv(fd, [mv[done:]], offset + done)
        if k <= 0:
            fail("short read")
        done += k
    return buf


def pwrite_all(fd, data, offset):
    mv = memoryview(data)
    while mv:
        k = os.pwrite(fd, mv[:1 << 30], offset)
        mv, offset = mv[k:], offset + k


def copy(src, dst, src_off, dst_off, n, buf=memoryview(bytearray(16 << 20))):
    """n bytes file to file, in the kernel where the filesystem allows, else through one buffer."""
    while n:
        try:
            k = os.copy_file_range(src, dst, min(n, 1 << 30), src_off, dst_off)
        except OSError:
            k = 0
        if k <= 0:
            k = os.preadv(src, [buf[:min(n, len(buf))]], src_off)
            if k <= 0:
                fail("short read")
            pwrite_all(dst, buf[:k], dst_off)
        src_off, dst_off, n = src_off + k, dst_off + k, n - k


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--pre", help="tokenizer.ggml.pre, when the tokenizer's Split regex is not one this script knows")
    args = ap.parse_args()
    t0 = time.time()
    config, kvs, tensors = plan(args.model_dir)
    kvs += tokenizer(args.model_dir, config, args.pre)

    header = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for key, vtype, value in kvs:
        header += gguf_str(key) + struct.pack("<I", vtype) + gguf_value(vtype, value)
    offset, offsets = 0, []
    for name, gtype, shape, nbytes, _ in tensors:
        ne = list(reversed(shape))  # ggml order: the innermost (contiguous) dimension first
        header += gguf_str(name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, gtype, offset)
        offsets.append(offset)
        offset += -(-nbytes // ALIGN) * ALIGN
    data_start = -(-len(header) // ALIGN) * ALIGN
    total = data_start + offset
    print(f"hf_to_gguf: {len(tensors)} tensors, {len(kvs)} keys, {total / 1e9:.2f} GB -> {args.out}", flush=True)

    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    pwrite_all(fd, header, 0)
    os.ftruncate(fd, total)  # alignment padding stays a zero-filled hole
    sources, done, shown = {}, 0, 0
    try:
        for k, ((name, gtype, shape, nbytes, src), off) in enumerate(zip(tensors, offsets)):
            dst = data_start + off
            if isinstance(src, bytes):
                pwrite_all(fd, src, dst)
            else:
                path, src_off, src_bytes, dtype, heads = src
                sfd = sources.get(path) or sources.setdefault(path, os.open(path, os.O_RDONLY))
                if not heads and (gtype == GGML_BF16 or dtype == "F32"):
                    copy(sfd, fd, src_off, dst, src_bytes)
                else:
                    data = pread_all(sfd, src_bytes, src_off)
                    if heads:
                        data = rows_interleaved(data, heads, src_bytes // shape[0])
                    pwrite_all(fd, bf16_to_f32(data) if gtype == GGML_F32 and dtype == "BF16" else data, dst)
            done += nbytes
            if done - shown >= 1 << 30 or k == len(tensors) - 1:
                shown = done
                dt = time.time() - t0
                print(f"  {done / 1e9:6.2f} / {offset / 1e9:.2f} GB  {dt:6.1f} s  {done / 1e9 / max(dt, 1e-9):5.2f} GB/s  {name}", flush=True)
    finally:
        for s in sources.values():
            os.close(s)
        os.close(fd)
    print(f"hf_to_gguf: wrote {args.out} ({total / 1e9:.2f} GB) in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
