#!/usr/bin/env python3
"""kernel-report.py — compile plumb's CUDA kernels with NVRTC on a machine without a GPU and report
what ptxas made of them (registers, spills, shared memory per kernel), optionally dumping the SASS.

    python3 tools/device/kernel-report.py [--arch sm_90a] [--filter NAME] [--sass DIR]

NVRTC comes from the PyPI wheel nvidia-cuda-nvrtc (the device's version, e.g. 13.0.88), and
cuobjdump from nvidia-cuda-cuobjdump; point NVRTC_LIB and CUOBJDUMP at them (default: under
/tmp/nvrtc, where `pip download` + unzip put them). The sources and options are the backend's own
(crates/backend-cuda/src/compile.rs), so what is reported is what the device will run.
"""
import argparse, ctypes, os, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPILE_RS = os.path.join(ROOT, "crates/backend-cuda/src/compile.rs")


def sources():
    text = open(COMPILE_RS).read()
    files = re.findall(r'include_str!\("(kernels/[^"]+)"\)', text)
    base = os.path.join(ROOT, "crates/backend-cuda/src")
    return "".join(open(os.path.join(base, f)).read() for f in files)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--filter", default="")
    ap.add_argument("--sass", help="write the SASS of the matching kernels into this folder")
    ap.add_argument("-D", dest="defines", action="append", default=[],
                    help="a compile-time switch compile.rs passes, e.g. -D PLUMB_ATT_NOMASK (repeatable)")
    a = ap.parse_args()
    lib = ctypes.CDLL(os.environ.get("NVRTC_LIB", "/tmp/nvrtc/nvidia/cu13/lib/libnvrtc.so.13"))
    prog = ctypes.c_void_p()
    src = sources().encode()
    r = lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"plumb_kernels.cu", 0, None, None)
    assert r == 0, f"nvrtcCreateProgram: {r}"
    opts = [f"--gpu-architecture={a.arch}", "--fmad=false", "--std=c++17", "-default-device", "-Xptxas=-v"]
    opts += [f"-D{d}" for d in a.defines]
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    r = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace")
    if r != 0:
        print(text)
        sys.exit(f"compile failed ({r})")
    # ptxas -v lines: "Compiling entry function 'NAME'" then "Used N registers, ... spill stores ...".
    current = None
    for line in text.splitlines():
        if "warning" in line.lower() or "serialized" in line.lower() or (a.filter and current and a.filter in current and "info" not in line):
            print(line.strip())
        m = re.search(r"entry function '([^']+)'", line)
        if m:
            current = m.group(1)
        if current and a.filter in current and ("registers" in line or "spill" in line or "stack" in line):
            print(f"{current}: {line.strip().split('info    : ')[-1]}")
    if a.sass:
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(prog, cubin)
        os.makedirs(a.sass, exist_ok=True)
        path = os.path.join(a.sass, "kernels.cubin")
        open(path, "wb").write(cubin.raw)
        tool = os.environ.get("CUOBJDUMP", "/tmp/nvrtc/nvidia/cu13/bin/cuobjdump")
        out = subprocess.run([tool, "--dump-sass", path], capture_output=True, text=True).stdout
        open(os.path.join(a.sass, "kernels.sass"), "w").write(out)
        print(f"SASS in {a.sass}/kernels.sass")


if __name__ == "__main__":
    main()
