#!/usr/bin/env python3
"""Compiles a CUDA kernel source, as NVRTC would get it, into a module the CPU emulator runs.

usage: translate.py SOURCE.cu OUT.so [NVRTC OPTIONS...]

The fake NVRTC (driver.cpp) calls this. Steps: the source is preprocessed as the device compile
sees it (`__CUDA_ARCH__` from --gpu-architecture, the options' -D macros) with `__global__` kept
as a marker; `extern __shared__` arrays become pointers to the block's dynamic shared memory;
each inline PTX statement becomes the `emu::` call that models it (prelude.h), or a call that
ends the launch with the instruction's name; the module's `extern "C"` kernels are listed in a
table; g++ builds the result with prelude.h ahead and runtime.h behind.
"""

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def split_top(text, sep):
    """Splits `text` at `sep` characters outside parentheses, brackets and string literals."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i : j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def matching_paren(text, open_at):
    """The index of the parenthesis that closes the one at `open_at`."""
    depth, i = 0, open_at
    while True:
        c = text[i]
        if c == '"':
            i += 1
            while text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1


def operands(group):
    """The C++ expressions of an asm operand list: `"=f"(x), "r"(y)` -> ["x", "y"]."""
    out = []
    for item in split_top(group, ","):
        item = item.strip()
        if not item:
            continue
        m = re.match(r'^(?:\[\w+\]\s*)?"[^"]*"\s*\((.*)\)$', item, re.S)
        if not m:
            raise ValueError(f"cannot read asm operand {item!r}")
        out.append(m.group(1))
    return out


def template_text(group):
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', group)).replace("\\n", "\n").replace("\\t", " ")


def model(asm_text, outs, ins):
    """The C++ expression that stands for one asm statement."""
    t = " ".join(asm_text.split())
    tight = re.sub(r"\s*,\s*", ",", t)
    ops = outs + ins
    if t.startswith("cvt.f32.f16 "):
        return f"(void)(({outs[0]}) = emu::cvt_f32_f16({ins[0]}))"
    if t.startswith("cvt.rn.f16.f32 "):
        return f"(void)(({outs[0]}) = emu::cvt_rn_f16_f32({ins[0]}))"
    if "cvta.to.shared" in t and len(outs) == 1 and len(ins) == 1:
        return f"(void)(({outs[0]}) = emu::smem_u32((const void*)({ins[0]})))"
    m = re.match(r"cp\.async\.c[ag]\.shared\.global(?:\.L2::\w+)? \[%(\d)\], \[%(\d)\], (\d+)(?:, %(\d))?;", t)
    if m:
        src_bytes = ops[int(m.group(4))] if m.group(4) else m.group(3)
        return f"emu::cp_async({ops[int(m.group(1))]}, (const void*)({ops[int(m.group(2))]}), {m.group(3)}, {src_bytes})"
    m = re.match(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.(bf16|f16)\.(?:bf16|f16)\.f32 "
                 r"\{%(\d+),%(\d+),%(\d+),%(\d+)\},\{%(\d+),%(\d+),%(\d+),%(\d+)\},\{%(\d+),%(\d+)\},"
                 r"\{%(\d+),%(\d+),%(\d+),%(\d+)\};", tight)
    if m:
        args = ", ".join(ops[int(i)] for i in m.groups()[1:])
        return f"emu::mma_m16n8k16<{'true' if m.group(1) == 'bf16' else 'false'}>({args})"
    m = re.match(r"ldmatrix\.sync\.aligned\.m8n8\.x4(\.trans)?\.shared\.b16 \{%(\d+),%(\d+),%(\d+),%(\d+)\},\[%(\d+)\];",
                 tight)
    if m:
        args = ", ".join(ops[int(i)] for i in m.groups()[1:])
        return f"emu::ldmatrix_x4({'true' if m.group(1) else 'false'}, {args})"
    m = re.match(r"mov\.u64 %0,%%(globaltimer|gridid);", tight)
    if m and len(outs) == 1:
        what = "emu::globaltimer()" if m.group(1) == "globaltimer" else "emu::g.grid_id"
        return f"(void)(({outs[0]}) = {what})"
    m = re.match(r"bar\.sync (%\d+|\d+),(%\d+|\d+);", tight)
    if m:
        id_, count = (ops[int(x[1:])] if x.startswith("%") else x for x in m.groups())
        return f"emu::named_barrier((unsigned)({id_}), (unsigned)({count}))"
    m = re.match(r"red\.release\.gpu\.global\.add\.u32 \[%0\],1;", tight)
    if m and not outs and len(ins) == 1:
        # Blocks run one after another here: a release add is a plain one.
        return f"(void)((*(unsigned*)({ins[0]}))++)"
    m = re.match(r"ld\.acquire\.gpu\.global\.u32 %0,\[%1\];", tight)
    if m and len(outs) == 1 and len(ins) == 1:
        return f"(void)(({outs[0]}) = *(volatile unsigned*)({ins[0]}))"
    m = re.match(r"atom\.acq_rel\.gpu\.add\.u32 %0,\[%1\],1;", tight)
    if m and len(outs) == 1 and len(ins) == 1:
        # Blocks run one after another here: the ordering it asks for holds already.
        return f"(void)(({outs[0]}) = (*(unsigned*)({ins[0]}))++)"
    if re.match(r"(cp\.async\.(commit_group|wait_group|wait_all)|griddepcontrol\.)", t):
        return "((void)0)"
    hopper = model_hopper(t, tight, outs, ins)
    if hopper:
        return hopper
    name = re.sub(r"[^\w.:%,\[\] {};-]", "", t)[:80]
    return f'emu::fail("inline PTX the emulator does not model: {name}")'


def operand(ops, tok):
    """An asm operand token (`%N` or an immediate) as a C++ expression."""
    return f"({ops[int(tok[1:])]})" if tok.startswith("%") else tok


def model_hopper(t, tight, outs, ins):
    """Hopper's mbarriers, TMA tile copies and warpgroup MMA (prelude.h), or None."""
    ops = outs + ins
    # Ordering and register hand-over only: nothing to do where one thread runs at a time and a
    # warpgroup MMA reads its operands when its group is waited for.
    if t == "" or re.match(r"(wgmma\.fence\.sync\.aligned|fence\.proxy\.async(\.shared::cta)?|"
                           r"fence\.mbarrier_init\.release\.cluster|setmaxnreg\.(inc|dec)\.sync\.aligned\.u32 \d+);$", t):
        return "((void)0)"
    if t == "wgmma.commit_group.sync.aligned;":
        return "emu::wgmma_commit()"
    # Statements whose operands map one to one onto an emu:: call's arguments.
    for pattern, call in (
        (r"wgmma\.wait_group\.sync\.aligned (\d+);$", "emu::wgmma_wait({})"),
        (r"st\.shared\.u32 \[(%\d+)\],(%\d+|\d+);$", "emu::st_shared_u32({}, {})"),
        (r"mbarrier\.init\.shared(?:::cta)?\.b64 \[(%\d+)\],(%\d+|\d+);$", "emu::mbar_init({}, {})"),
        (r"mbarrier\.arrive\.expect_tx\.shared(?:::cta)?\.b64 _,\[(%\d+)\],(%\d+|\d+);$", "emu::mbar_arrive({}, {})"),
        (r"mbarrier\.arrive\.shared(?:::cta)?\.b64 _,\[(%\d+)\];$", "emu::mbar_arrive({}, 0)"),
    ):
        m = re.match(pattern, tight)
        if m:
            return call.format(*(operand(ops, x) for x in m.groups()))
    m = re.match(r"\{ \.reg \.pred (\w+); mbarrier\.try_wait\.parity\.shared(?:::cta)?\.b64 \1,\[(%\d+)\],(%\d+|\d+); "
                 r"selp\.(?:u32|b32) (%\d+),1,0,\1; \}$", tight)
    if m and len(outs) == 1:
        return f"(void)(({outs[0]}) = emu::mbar_wait({operand(ops, m.group(2))}, {operand(ops, m.group(3))}))"
    # A tile copy into this block's shared memory, or (`.multicast::cluster`, a mask after the
    # barrier) into every rank of the mask.
    m = re.match(r"cp\.async\.bulk\.tensor\.([1-5])d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes"
                 r"(\.multicast::cluster)? \[(%\d+)\],\[(%\d+),\{([%\d,]+)\}\],\[(%\d+)\](?:,(%\d+))?;$", tight)
    if m and bool(m.group(2)) == bool(m.group(7)):
        rank, multicast, dst, mp, cs, bar, mask = m.groups()
        coords = [operand(ops, x) for x in cs.split(",")]
        if len(coords) != int(rank):
            return 'emu::fail("cp.async.bulk.tensor: a coordinate count unlike its rank")'
        padded = ", ".join(f"(int){x}" for x in coords + ["0"] * (5 - len(coords)))
        call, tail = ("tma_load_multicast", f", (unsigned){operand(ops, mask)}") if multicast else ("tma_load", "")
        return (f"emu::{call}({rank}, {operand(ops, dst)}, (const void*)(uintptr_t){operand(ops, mp)}, "
                f"emu::I5{{{{{padded}}}}}, {operand(ops, bar)}{tail})")
    # An arrival on another rank's barrier: mapa of this block's address, then the remote arrive.
    m = re.match(r"\{ \.reg \.b32 (\w+); mapa\.shared::cluster\.u32 \1,(%\d+),(%\d+|\d+); "
                 r"mbarrier\.arrive\.shared::cluster\.b64 _,\[\1\]; \}$", tight)
    if m:
        return f"emu::mbar_arrive_remote({operand(ops, m.group(2))}, (unsigned){operand(ops, m.group(3))})"
    # Four words into another rank's shared memory, completing their bytes on its barrier.
    m = re.match(r"\{ \.reg \.b32 (\w+),(\w+); mapa\.shared::cluster\.u32 \1,(%\d+),(%\d+|\d+); "
                 r"mapa\.shared::cluster\.u32 \2,(%\d+),\4; "
                 r"st\.async\.shared::cluster\.mbarrier::complete_tx::bytes\.v4\.b32 \[\1\],"
                 r"\{(%\d+),(%\d+),(%\d+),(%\d+)\},\[\2\]; \}$", tight)
    if m:
        _, _, addr, cta, bar, w0, w1, w2, w3 = m.groups()
        ws = ", ".join(f"(unsigned){operand(ops, x)}" for x in (w0, w1, w2, w3))
        return (f"emu::st_async_v4({operand(ops, addr)}, (unsigned){operand(ops, cta)}, "
                f"{operand(ops, bar)}, {ws})")
    if re.match(r"barrier\.cluster\.arrive(\.release)?; barrier\.cluster\.wait(\.acquire)?;$", t):
        return "emu::cluster_barrier()"
    m = re.match(r"\{ \.reg \.pred (\w+); setp\.ne\.b32 \1,(%\d+|\d+),0; "
                 r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.(bf16|f16)\.(?:bf16|f16) "
                 r"\{([%\d,]+)\},(?:(%\d+)|\{(%\d+),(%\d+),(%\d+),(%\d+)\}),(%\d+),\1,(-?1),(-?1)(?:,([01]))?,([01]); \}$",
                 tight)
    if m:
        _, pred, n, ty, dl, da, a0, a1, a2, a3, db, sa, sb, ta, tb = m.groups()
        ds = ", ".join(f"&{operand(ops, x)}" for x in dl.split(","))
        regs = da is None
        if regs and ta is not None:
            return 'emu::fail("wgmma: a transposed A in registers")'
        if not regs and ta is None:
            return 'emu::fail("wgmma: a descriptor A without its transpose flag")'
        avals = ", ".join(f"(unsigned){operand(ops, x)}" for x in (a0, a1, a2, a3)) if regs else "0u, 0u, 0u, 0u"
        da_expr = "0ull" if regs else f"(unsigned long long){operand(ops, da)}"
        return (f"emu::wgmma_issue<{'true' if ty == 'bf16' else 'false'}, {n}>({{{ds}}}, {'true' if regs else 'false'}, "
                f"emu::U4{{{{{avals}}}}}, {da_expr}, (unsigned long long){operand(ops, db)}, (int){operand(ops, pred)}, "
                f"{sa}, {sb}, {ta or 0}, {tb})")
    return None


def rewrite_asm(text):
    out, pos = [], 0
    pattern = re.compile(r"\basm\s*(?:volatile|__volatile__)?\s*\(")
    while True:
        m = pattern.search(text, pos)
        if not m:
            out.append(text[pos:])
            return "".join(out)
        close = matching_paren(text, m.end() - 1)
        groups = split_top(text[m.end() : close], ":")
        groups += [""] * (4 - len(groups))
        expr = model(template_text(groups[0]), operands(groups[1]), operands(groups[2]))
        out.append(text[pos : m.start()])
        out.append(expr)
        pos = close + 1


def rewrite_extern_shared(text):
    pattern = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w\s]*?)\s+(\w+)\s*\[\s*\]\s*;")
    return pattern.sub(lambda m: f"{m.group(1)}* const {m.group(2)} = reinterpret_cast<{m.group(1)}*>(emu::dyn_smem);", text)


def rewrite_static_shared(text):
    """Each `__shared__ T name[...];` as a reference to its place in prelude.h's arena
    (`emu::static_shared`), which a cluster's blocks swap with the dynamic bytes."""
    pattern = re.compile(r"__shared__\s+(?:__align__\s*\(\s*(\d+)\s*\)\s*)?([A-Za-z_][\w\s:]*?)\s+(\w+)\s*((?:\[[^\]]+\]\s*)*);")
    count = iter(range(1 << 30))

    def sub(m):
        align, ty, name = m.group(1) or "1", m.group(2), m.group(3)
        dims = re.sub(r"\s+", " ", m.group(4)).strip()
        if dims:
            return f"{ty} (&{name}){dims} = emu::static_shared<{ty}{dims}, {align}, {next(count)}>();"
        return f"{ty}& {name} = emu::static_shared<{ty}, {align}, {next(count)}>();"

    out = pattern.sub(sub, text)
    left = re.search(r"\b__shared__\b.*", out)
    if left:
        sys.stderr.write(f"cuda-emu: a __shared__ declaration translate.py cannot read: {left.group(0)[:200]}\n")
        sys.exit(1)
    return out


def kernels(text):
    names = []
    for m in re.finditer(r'extern\s+"C"\s+EMU_GLOBAL\s+void\s+', text):
        i = m.end()
        while True:
            a = re.match(r"(__\w+__)\s*\(", text[i:])
            if not a:
                break
            i = matching_paren(text, i + a.end() - 1) + 1
            while text[i].isspace():
                i += 1
        names.append(re.match(r"(\w+)\s*\(", text[i:]).group(1))
    return names


def main():
    src, out, opts = sys.argv[1], sys.argv[2], sys.argv[3:]
    defines = ["-D__global__=EMU_GLOBAL"]
    for o in opts:
        m = re.match(r"--gpu-architecture=(?:sm|compute)_(\d+)(a?)$", o) or re.match(r"-arch=(?:sm|compute)_(\d+)(a?)$", o)
        if m:
            defines.append(f"-D__CUDA_ARCH__={int(m.group(1)) * 10}")
            if m.group(2):
                defines.append(f"-D__CUDA_ARCH_FEAT_SM{m.group(1)}_ALL")
        elif o.startswith("-D"):
            defines.append(o)
    pre = subprocess.run(["g++", "-E", "-P", "-x", "c++", "-std=c++17", *defines, src], capture_output=True, text=True)
    if pre.returncode:
        sys.stderr.write(pre.stderr)
        sys.exit(1)
    text = rewrite_asm(rewrite_static_shared(rewrite_extern_shared(pre.stdout)))
    names = kernels(text)
    table = ",\n".join(f'    emu::kernel("{n}", &{n})' for n in names)
    module = (
        '#include "prelude.h"\n'
        + text
        + '\n#include "runtime.h"\n'
        + 'extern "C" const emu::Kernel* emu_kernels(int* n) {\n'
        + f"  static const emu::Kernel k[] = {{\n{table}\n  }};\n"
        + f"  *n = {len(names)};\n  return k;\n}}\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        cpp = os.path.join(tmp, "module.cpp")
        with open(cpp, "w") as f:
            f.write(module)
        if os.environ.get("PLUMB_CUDA_EMU_KEEP"):
            with open(os.environ["PLUMB_CUDA_EMU_KEEP"], "w") as f:
                f.write(module)
        opt = os.environ.get("PLUMB_CUDA_EMU_OPT", "-O2")
        cc = subprocess.run(
            ["g++", "-std=c++17", opt, "-march=native", "-g0", "-fno-gnu-unique", "-fPIC", "-shared", "-ffp-contract=off", "-fno-strict-aliasing",
             "-fno-math-errno", "-w", f"-I{HERE}", "-o", out, cpp],
            capture_output=True,
            text=True,
        )
        if cc.returncode:
            sys.stderr.write(cc.stderr[:20000])
            sys.exit(1)


if __name__ == "__main__":
    main()
