#!/usr/bin/env bash
# `--svg FILE` of `reshard layout`, `plan` and `check-plan` (include/reshard/ext/svg.hpp): every
# picture parses as XML; rendered to PNG by rsvg-convert (when installed), a pixel inside a known
# box has its rank's colour, and a pixel inside a dropped transfer's box is red. --svg-dims picks
# the drawn dims, thousands of ranks are capped and say so, and bad --svg-dims are errors.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

# The first colours of the palette (detail::svg::palette), by rank.
palette=(4e79a7 f28e2b 59a14f edc948 b07aa1 76b7b2 9c755f bab0ac)

# A decoder of the 8-bit RGBA (or RGB) PNGs rsvg-convert writes: prints the pixel at x,y as rrggbb.
cat >"$tmp/pixel.py" <<'EOF'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
x, y = int(sys.argv[2]), int(sys.argv[3])
assert data[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat = 8, b""
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
        assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
bpp = 4 if colour == 6 else 3
raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
for r in range(y + 1):  # the rows up to y are enough
    f, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line)
    prev = line
print("%02x%02x%02x" % tuple(rows[y][x * bpp:x * bpp + 3]))
EOF

# parses NAME FILE: FILE is well-formed XML with an <svg> root
parses() {
  if "$PY" -c 'import sys, xml.etree.ElementTree as E; sys.exit(0 if E.parse(sys.argv[1]).getroot().tag.endswith("svg") else 1)' "$2" 2>/dev/null; then
    pass
  else
    fail "$1: not well-formed SVG" "$(head -c 400 "$2" 2>/dev/null)"
  fi
}

# colour_at NAME FILE X Y RRGGBB: rendered, the pixel at X,Y has colour RRGGBB
have_rsvg=1
command -v rsvg-convert >/dev/null || { have_rsvg=0; echo "rsvg-convert not found (librsvg2-bin): pixel checks skipped"; }
colour_at() {
  [[ $have_rsvg -eq 1 ]] || return 0
  local got
  rsvg-convert "$2" -o "$2.png" && got=$("$PY" "$tmp/pixel.py" "$2.png" "$3" "$4") || got="(no picture)"
  if [[ $got == "$5" ]]; then pass; else fail "$1: pixel $3,$4 is $got, expected $5"; fi
}

# The drawing area starts at (10, 30); a square tensor fills 600 x 600 px, a tall one 600 high.
# 8 x 8 over dev [2,4] map [1,0]: rank r holds rows 4*(r/4)..+4, columns 2*(r%4)..+2.
L='{"dev_matrix":[2,4],"tensor_map":[1,0],"shape":[8,8]}'
run layout --layout "$L" --svg "$tmp/l.svg"
if [[ $rc -eq 0 && -s $tmp/l.svg && $out == layout* ]]; then pass; else fail "layout --svg writes the file and the table" "rc $rc" "$err"; fi
parses "layout" "$tmp/l.svg"
for r in 0 3 5 6; do
  x=$((10 + (2 * (r % 4)) * 75 + 20)) y=$((30 + 4 * (r / 4) * 75 + 40))
  colour_at "layout: rank $r's box" "$tmp/l.svg" "$x" "$y" "${palette[r]}"
done
ls "$tmp" | grep -q 'tmp$' && fail "layout --svg left a temporary file" "$(ls "$tmp")" || pass

# uneven (chunk): 10 rows over 4 ranks are 3,3,3,1 rows, drawn to scale (60 px a row)
run layout --layout '{"dev_matrix":[4],"tensor_map":[0,-1],"shape":[10,4],"split":"chunk"}' --svg "$tmp/u.svg"
parses "uneven layout" "$tmp/u.svg"
colour_at "uneven: row 8 is rank 2's" "$tmp/u.svg" 30 $((30 + 8 * 60 + 30)) "${palette[2]}"
colour_at "uneven: row 9 is rank 3's" "$tmp/u.svg" 30 $((30 + 9 * 60 + 30)) "${palette[3]}"

# replicas: every owner in the label
run layout --layout '{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4]}' --svg "$tmp/r.svg"
parses "replicated layout" "$tmp/r.svg"
if grep -q '>ranks 0-3<' "$tmp/r.svg" && grep -q '>ranks 4-7<' "$tmp/r.svg"; then pass; else fail "replicated boxes list their owners"; fi

# N-d: --svg-dims picks rows and columns, the other dims become panels
T='{"dev_matrix":[2,2,2],"tensor_map":[2,1,0],"shape":[4,6,10]}'
run layout --layout "$T" --svg "$tmp/n.svg"
parses "3-d layout" "$tmp/n.svg"
if grep -q '>dim 2 \[0:5\]<' "$tmp/n.svg" && grep -q '>dim 2 \[5:10\]<' "$tmp/n.svg"; then pass; else fail "3-d: a panel per slice of dim 2"; fi
run layout --layout "$T" --svg "$tmp/n2.svg" --svg-dims 2,0
parses "3-d layout, --svg-dims 2,0" "$tmp/n2.svg"
if grep -q '>dim 1 \[0:3\]<' "$tmp/n2.svg" && grep -q 'rows: dim 2, columns: dim 0' "$tmp/n2.svg"; then pass; else fail "--svg-dims 2,0: panels of dim 1"; fi
expect_error "--svg-dims 0,0" 1 "--svg-dims 0,0: the two dims must differ" layout --layout "$T" --svg "$tmp/x.svg" --svg-dims 0,0
expect_error "--svg-dims 0,3" 1 "--svg-dims 0,3: dim 3 is not a dim of the tensor" layout --layout "$T" --svg "$tmp/x.svg" --svg-dims 0,3
expect_error "--svg-dims 1" 1 "--svg-dims 1: expected two dims" layout --layout "$T" --svg "$tmp/x.svg" --svg-dims 1
[[ -e $tmp/x.svg ]] && fail "a bad --svg-dims wrote the file" || pass

# thousands of ranks: capped, and the picture says so
run layout --layout '{"dev_matrix":[64,64],"tensor_map":[1,0],"shape":[64,64]}' --svg "$tmp/big.svg"
parses "4096 ranks" "$tmp/big.svg"
if grep -q 'showing 1000 of 4096 boxes' "$tmp/big.svg"; then pass; else fail "4096 ranks: the cap is said"; fi

# plan: 8 x 4 from dev [2,4] map [1,-1] (rows 0:4 on ranks 0-3, 4:8 on 4-7) to dev [4] map [0,-1]
S='{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4]}'
D='{"dev_matrix":[4],"tensor_map":[0,-1],"shape":[8,4]}'
run plan --src "$S" --dst "$D" --svg "$tmp/p.svg" --json
if [[ $rc -eq 0 ]] && printf '%s' "$out" >"$tmp/plan.json"; then pass; else fail "plan --svg" "$err"; fi
parses "plan" "$tmp/p.svg"
# target rank 2 (rows 4:6) receives from rank 4, target rank 3 (rows 6:8) from rank 5
colour_at "plan: target 2's box is sender 4's colour" "$tmp/p.svg" 100 $((30 + 4 * 75 + 40)) "${palette[4]}"
colour_at "plan: target 3's box is sender 5's colour" "$tmp/p.svg" 100 $((30 + 6 * 75 + 40)) "${palette[5]}"
if grep -q 'cross-rank 64 B in 2 messages; lower bound 64 B' "$tmp/p.svg"; then pass; else fail "plan: the bytes in the legend (float32)"; fi
if grep -q 'stroke-dasharray' "$tmp/p.svg"; then pass; else fail "plan: local copies drawn apart"; fi

# check-plan: the plan less its transfer to rank 1 (rows 2:4): that box is red
"$PY" -c "
import json, sys
j = json.load(open(sys.argv[1]))
j['transfers'] = [t for t in j['transfers'] if t['dst'] != 1]
json.dump(j, open(sys.argv[2], 'w'))" "$tmp/plan.json" "$tmp/dropped.json"
run check-plan --plan "$tmp/dropped.json" --svg "$tmp/c.svg"
if [[ $rc -eq 1 && -s $tmp/c.svg ]]; then pass; else fail "check-plan --svg of a wrong plan: exit 1 and the picture" "rc $rc" "$err"; fi
parses "check-plan" "$tmp/c.svg"
colour_at "check-plan: the dropped transfer's box is red" "$tmp/c.svg" 100 $((30 + 2 * 75 + 60)) ff0000
colour_at "check-plan: target 2's box is still sender 4's" "$tmp/c.svg" 100 $((30 + 4 * 75 + 40)) "${palette[4]}"
run check-plan --plan "$tmp/plan.json" --svg "$tmp/ok.svg"
parses "check-plan of a correct plan" "$tmp/ok.svg"
if [[ $rc -eq 0 ]] && ! grep -q 'fill="#ff0000"' "$tmp/ok.svg"; then pass; else fail "a correct plan: nothing red"; fi

# text is escaped: an unwritable path is an error naming --svg, not a crash
expect_error "--svg into a missing directory" 1 "--svg" layout --layout "$L" --svg "$tmp/no/such/dir/l.svg"

finish
