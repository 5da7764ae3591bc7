# Rewrites each kernel launch  name<<<grid, block, shared, stream>>>(args);  of the given .cu files
# as  emu_launch(dim3(grid), dim3(block), std::bind([](auto... a) { name(a...); }, args), stream);
# and writes the result as .cpp into the output folder, for the CPU emulation
# (tests/gpu/emu/run). The arguments are evaluated and copied at the launch, as CUDA does, so a
# launch recorded by a stream capture replays with the values it was launched with.
# Usage: launches.py OUT FILE.cu...
import re, sys, os
def split_top(s):
    parts, depth, cur = [], 0, ''
    for ch in s:
        if ch in '([{<': depth += 1
        if ch in ')]}>': depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur); cur = ''
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]
pat = re.compile(r'([A-Za-z_]\w*(?:<[^<>;]*>)?)\s*<<<(.*?)>>>\s*\((.*?)\);', re.S)
for path in sys.argv[2:]:
    s = open(path).read()
    def rep(m):
        cfg = split_top(m.group(2))
        stream = cfg[3] if len(cfg) > 3 else 'nullptr'
        args = m.group(3).strip()
        return ('emu_launch(dim3(%s), dim3(%s), std::bind([](auto... emu_a) { %s(emu_a...); }%s), '
                '(const void *)(%s));' % (cfg[0], cfg[1], m.group(1), ', ' + args if args else '',
                                          stream))
    s2, n = pat.subn(rep, s)
    out = os.path.join(sys.argv[1], os.path.basename(path).replace('.cu', '.cpp'))
    open(out, 'w').write(s2)
    print(path, n, 'launches')
