#!/usr/bin/env python3
"""transform.py ROOT OUT [FILE.cu ...]: copies gpu/cuda's CUDA sources (and
the files named) into OUT as host C++ for the emulator:
launches K<<<g, b, s, st>>>(args) become ::emu::launch(::emu::cfg(g, b, s, st), K, args),
dynamic shared memory comes from the emulator, cp.async from its copies."""
import os, re, sys

root = sys.argv[1] if len(sys.argv) > 1 else '/work/main'
out = sys.argv[2] if len(sys.argv) > 2 else '/tmp/wemu/src'
src_dir = os.path.join(root, 'gpu/cuda')
dst_dir = os.path.join(out, 'gpu/cuda')
os.makedirs(dst_dir, exist_ok=True)


def kernel_start(s, i):
    """Index where the kernel expression ending just before s[i] begins."""
    j = i
    while s[j - 1].isspace():
        j -= 1
    if s[j - 1] == '>':  # template arguments
        depth = 0
        while True:
            j -= 1
            c = s[j]
            if c == '>':
                depth += 1
            elif c == '<':
                depth -= 1
                if depth == 0:
                    break
    while j > 0 and (s[j - 1].isalnum() or s[j - 1] in '_:'):
        j -= 1
    return j


def rewrite_launches(s):
    n = 0
    while True:
        i = s.find('<<<')
        if i < 0:
            return s, n
        k0 = kernel_start(s, i)
        kernel = s[k0:i].strip()
        e = s.index('>>>', i)
        cfg = s[i + 3:e]
        p = e + 3
        while s[p].isspace():
            p += 1
        assert s[p] == '(', s[i:p + 20]
        s = s[:k0] + '::emu::launch(::emu::cfg(' + cfg + '), ' + kernel + ', ' + s[p + 1:]
        n += 1


def balanced(s, i):
    """Index just past the parenthesis that closes the one at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == '(':
            depth += 1
        elif s[j] == ')':
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError('unbalanced parentheses')


def rewrite_launch_bounds(s):
    """__launch_bounds__(N) becomes a check, first thing in the kernel's body,
    that the launch has at most N threads per block (a GPU refuses more)."""
    while True:
        i = s.find('__launch_bounds__(')
        if i < 0:
            return s
        open_paren = i + len('__launch_bounds__')
        end = balanced(s, open_paren)
        bound = s[open_paren + 1:end - 1]
        s = s[:i] + s[end:]
        params = s.index('(', i)
        body = s.index('{', balanced(s, params))
        s = s[:body + 1] + ' ::emu::launch_bound(' + bound + ');' + s[body + 1:]


def rewrite(name, s):
    s = s.replace('#include <mma.h>\n', '')
    s = re.sub(r'extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w:][\w:\s]*?)\s+(\w+)\[\];',
               r'\1* \2 = reinterpret_cast<\1*>(::emu::dynamic_smem());', s)
    if name == 'attention_common.cuh':
        a = s.index('// 16 bytes global -> shared')
        b = s.index('// K (which 0) or V (1) of kv head')
        s = s[:a] + '''inline void cp_async_16(void* smem, const void* gmem, bool valid) { ::emu::cp_async(smem, gmem, valid); }
inline void cp_async_commit() { ::emu::cp_async_commit(); }
template <int N>
inline void cp_async_wait() { ::emu::cp_async_wait(N); }

''' + s[b:]
    s = rewrite_launch_bounds(s)
    s, n = rewrite_launches(s)
    assert 'asm' not in re.sub(r'//.*', '', s), name
    return s, n


total = 0
for f in sorted(os.listdir(src_dir)):
    if not (f.endswith('.cu') or f.endswith('.cuh')):
        continue
    s, n = rewrite(f, open(os.path.join(src_dir, f)).read())
    total += n
    target = f[:-3] + '.cu.cpp' if f.endswith('.cu') else f
    open(os.path.join(dst_dir, target), 'w').write(s)
# The tests' own CUDA sources.
tsrc = os.path.join(root, 'tests/gpu/cuda')
tdst = os.path.join(out, 'tests/gpu/cuda')
os.makedirs(tdst, exist_ok=True)
for f in sorted(os.listdir(tsrc)):
    if f.endswith('.cu') and f != 'device_fault.cu':
        s, n = rewrite(f, open(os.path.join(tsrc, f)).read())
        total += n
        open(os.path.join(tdst, f[:-3] + '.cu.cpp'), 'w').write(s)
# Further CUDA sources named on the command line (the emulator's own test).
for f in sys.argv[3:]:
    s, n = rewrite(os.path.basename(f), open(f).read())
    total += n
    open(os.path.join(out, os.path.basename(f) + '.cpp'), 'w').write(s)
print('launches rewritten:', total)
