#!/usr/bin/env bash
# `reshard layout`: each rank's box and the replica groups, as JSON and as a table.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

L='{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4]}'
expect_json "dev [2,4] map [1,-1]: 8 ranks" 'len(j["ranks"]) == 8 and [r["rank"] for r in j["ranks"]] == list(range(8))' layout --layout "$L" --json
expect_json "ranks 0-3 hold [0:4, 0:4]" 'all(j["ranks"][r]["offset"] == [0,0] and j["ranks"][r]["shape"] == [4,4] for r in range(4))' layout --layout "$L" --json
expect_json "ranks 4-7 hold [4:8, 0:4]" 'all(j["ranks"][r]["offset"] == [4,0] and j["ranks"][r]["shape"] == [4,4] for r in range(4,8))' layout --layout "$L" --json
expect_json "replica groups of 4" 'j["replica_groups"] == [[0,1,2,3],[4,5,6,7]]' layout --layout "$L" --json
expect_json "only ranks and replica_groups" 'sorted(j) == ["ranks","replica_groups"] and all(sorted(r) == ["offset","rank","shape"] for r in j["ranks"])' layout --layout "$L" --json

# mindspore.md examples
expect_json "dev [2,4] map [0,1]" '[(r["offset"], r["shape"]) for r in j["ranks"]] == [([0,0],[2,2]),([2,0],[2,2]),([4,0],[2,2]),([6,0],[2,2]),([0,2],[2,2]),([2,2],[2,2]),([4,2],[2,2]),([6,2],[2,2])] and len(j["replica_groups"]) == 8' \
  layout --layout '{"dev_matrix":[2,4],"tensor_map":[0,1],"shape":[8,4]}' --json
expect_json "middle axis repeats" 'j["replica_groups"] == [[0,2],[1,3],[4,6],[5,7]] and j["ranks"][5]["offset"] == [2,3] and j["ranks"][5]["shape"] == [2,3]' \
  layout --layout '{"dev_matrix":[2,2,2],"tensor_map":[2,0],"shape":[4,6]}' --json
expect_json "tuple entry [[2,1],0]" '[j["ranks"][r]["offset"] for r in (0,1,2,4)] == [[0,0],[0,4],[1,0],[2,0]] and j["ranks"][0]["shape"] == [1,4]' \
  layout --layout '{"dev_matrix":[4,2,2],"tensor_map":[[2,1],0],"shape":[8,8]}' --json
expect_json "optimizer sharding step 2 size 4" 'all(j["ranks"][r]["offset"] == [2*((r//2)%4), 2*(r%2)] and j["ranks"][r]["shape"] == [2,2] for r in range(8)) and j["replica_groups"] == [[r] for r in range(8)]' \
  layout --layout '{"dev_matrix":[4,2],"tensor_map":[-1,0],"shape":[8,4],"opt_shard":{"step":2,"size":4}}' --json
expect_json "optimizer sharding step 2 size 2" 'all(j["ranks"][r]["offset"][0] == (0 if r in (0,1,4,5) else 4) for r in range(8)) and j["replica_groups"] == [[0,4],[1,5],[2,6],[3,7]]' \
  layout --layout '{"dev_matrix":[4,2],"tensor_map":[-1,0],"shape":[8,4],"opt_shard":{"step":2,"size":2}}' --json
expect_json "optimizer sharding, whole group" 'all(j["ranks"][r]["offset"] == [2*r,0] for r in range(8))' \
  layout --layout '{"dev_matrix":[8],"tensor_map":[-1,-1],"shape":[16,2],"opt_shard":{"step":1,"size":-1}}' --json
expect_json "pipeline stage 1: ranks 8-15" '[r["rank"] for r in j["ranks"]] == list(range(8,16)) and j["replica_groups"] == [[8,9,10,11],[12,13,14,15]]' \
  layout --layout '{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"stage":1}' --json
expect_json "chunk: 10 rows over 4 ranks" '[r["shape"][0] for r in j["ranks"]] == [3,3,3,1]' \
  layout --layout '{"dev_matrix":[4],"tensor_map":[0],"shape":[10],"split":"chunk"}' --json
expect_json "balanced: 10 rows over 4 ranks" '[r["shape"][0] for r in j["ranks"]] == [3,3,2,2]' \
  layout --layout '{"dev_matrix":[4],"tensor_map":[0],"shape":[10],"split":"balanced"}' --json
expect_json "split_sizes [5,3]" '[r["shape"][0] for r in j["ranks"]] == [5,3] and j["ranks"][1]["offset"] == [5,0]' \
  layout --layout '{"dev_matrix":[2],"tensor_map":[0,-1],"shape":[8,4],"split_sizes":[5,3]}' --json
expect_json "0-d tensor" 'j["ranks"] == [{"rank":0,"offset":[],"shape":[]}]' \
  layout --layout '{"dev_matrix":[1],"tensor_map":[],"shape":[]}' --json

# @file and @- (stdin)
printf '%s\n' "$L" >"$tmp/l.json"
expect_json "--layout @file.json" 'j["replica_groups"] == [[0,1,2,3],[4,5,6,7]]' layout --layout "@$tmp/l.json" --json
expect_json "-l @file.json" 'len(j["ranks"]) == 8' layout -l "@$tmp/l.json" --json
if out=$(printf '%s' "$L" | "$RESHARD" layout --layout @- --json) &&
   printf '%s' "$out" | "$PY" -c 'import json,sys; sys.exit(0 if len(json.load(sys.stdin)["ranks"]) == 8 else 1)'; then
  pass
else
  fail "--layout @- reads stdin" "$out"
fi

# the table
expect_text "table header" '^layout dev\[2,4\] map\[1,-1\] shape\[8,4\]: 8 ranks, 2 distinct shards$' layout --layout "$L"
expect_text "table row of rank 5" '^ +5  \[4:8,0:4\]  \[4,4\]$' layout --layout "$L"
expect_text "table replica group" '^  \[0:4,0:4\]  ranks 0-3$' layout --layout "$L"
expect_text "table replica group of two" '^  \[0:2,0:3\]  ranks 0,2$' layout --layout '{"dev_matrix":[2,2,2],"tensor_map":[2,0],"shape":[4,6]}'

finish
