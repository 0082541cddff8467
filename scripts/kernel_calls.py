"""The calls left in the vector kernels of a built binary: what each CPU tier's kernel
(a function named `...::avx512` or `...::avx2`, from `multiversion!`) calls out of line.

  python scripts/kernel_calls.py target/release/masked [TIER]

A kernel is one function per tier compiled with that tier's features; what LLVM inlines
into it gets them, what it calls stays baseline code (no AVX), called per element or per
chunk when it sits in the kernel's loop. The release profile compiles each crate's
codegen units separately (`lto = "off"`), so an iterator adapter or a closure left out of
line in one unit is not inlined later: this lists them. Expected: allocation and panics,
the libm functions of the scalar paths (`exp`, `pow`, ...), the selection's own
AVX2 helpers, and a few per-row closures; an iterator adapter (`Zip`, `Enumerate`,
`ChunksExact`, `try_fold`'s `Wrapped`, `array::from_fn`) is a kernel to rewrite as index
loops (docs/internals.md). Needs binutils (`objdump`, `readelf`, `nm`). Standard library
only.
"""
import collections
import re
import subprocess
import sys


def main():
    binary = sys.argv[1]
    tier = "::" + (sys.argv[2] if len(sys.argv) > 2 else "avx512")
    # calls through the GOT: slot address -> target address
    slots = {}
    for line in subprocess.run(["readelf", "-rW", binary], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        p = line.split()
        if len(p) >= 4 and p[2] == "R_X86_64_RELATIVE":
            slots[int(p[0], 16)] = int(p[3], 16)
        elif len(p) >= 5 and p[2] in ("R_X86_64_GLOB_DAT", "R_X86_64_JUMP_SLOT"):
            slots[int(p[0], 16)] = p[4]
    names = {}
    for line in subprocess.run(["nm", "-C", binary], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        p = line.split(" ", 2)
        if len(p) == 3 and p[0] and p[1] in "tTwW":
            names.setdefault(int(p[0], 16), p[2])
    dis = subprocess.Popen(["objdump", "-d", "--no-show-raw-insn", "-C", binary],
                           stdout=subprocess.PIPE, text=True)
    head = re.compile(r"^[0-9a-f]+ <(.*)>:$")
    calls = collections.Counter()
    callers = collections.defaultdict(set)
    current = None
    for line in dis.stdout:
        m = head.match(line)
        if m:
            current = m.group(1)
            continue
        if current is None or tier not in current or "\tcall" not in line:
            continue
        m = re.search(r"# ([0-9a-f]+) <_DYNAMIC", line)
        if m:
            t = slots.get(int(m.group(1), 16))
            target = names.get(t, str(t)) if isinstance(t, int) else str(t)
        elif "<" in line:
            target = re.sub(r"\+0x[0-9a-f]+$", "", line.split("<", 1)[1].rsplit(">", 1)[0])
        else:
            target = "(indirect)"
        calls[target] += 1
        callers[target].add(current.split(tier)[0])
    dis.wait()
    quiet = ("panic", "memcpy", "memset", "memmove", "__rust", "handle_alloc_error",
             "unwrap_failed", "slice_index", "slice_end_index", "slice_start_index",
             "expect_failed", "capacity_overflow", "core::fmt", "_Unwind", "(indirect)")
    print(f"calls out of the {tier[2:]} kernels (count, callee | kernels calling it)")
    for target, count in calls.most_common():
        if any(q in target for q in quiet):
            continue
        some = sorted(callers[target])[:2]
        print(f"{count:6d}  {target[:140]} | {len(callers[target])}: {', '.join(some)}")


if __name__ == "__main__":
    main()
