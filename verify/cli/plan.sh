#!/usr/bin/env bash
# `reshard plan`: transfers and cost, as JSON and as text.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

S='{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4]}'
D='{"dev_matrix":[4],"tensor_map":[0,-1],"shape":[8,4]}'
expect_json "8 -> 4: keys" 'sorted(j) == sorted(["plan_version","src","dst","transfers","cross_bytes","local_bytes","lower_bound_bytes","messages","max_sent_bytes","mean_sent_bytes"])' plan --src "$S" --dst "$D" --json
expect_json "8 -> 4: transfer fields" 'all(sorted(t) == ["bytes","dst","offset","shape","src"] for t in j["transfers"])' plan --src "$S" --dst "$D" --json
expect_json "8 -> 4: cross bytes == lower bound" 'j["cross_bytes"] == j["lower_bound_bytes"] == 64' plan --src "$S" --dst "$D" --json
expect_json "8 -> 4: ranks 0 and 1 copy locally" 'j["local_bytes"] == 64 and [(t["src"], t["dst"]) for t in j["transfers"] if t["src"] == t["dst"]] == [(0,0),(1,1)]' plan --src "$S" --dst "$D" --json
expect_json "8 -> 4: 2 messages, max and mean sent" 'j["messages"] == 2 and j["max_sent_bytes"] == 32 and j["mean_sent_bytes"] == 8' plan --src "$S" --dst "$D" --json
expect_json "8 -> 4: every target box covered once" 'sorted((t["dst"], t["offset"][0], t["shape"][0]) for t in j["transfers"]) == [(0,0,2),(1,2,2),(2,4,2),(3,6,2)]' plan --src "$S" --dst "$D" --json
expect_json "bytes = elements * dtype size" 'all(t["bytes"] == t["shape"][0]*t["shape"][1]*2 for t in j["transfers"]) and j["cross_bytes"] == 32' plan --src "$S" --dst "$D" --dtype bfloat16 --json
expect_json "--dtype float64" 'j["cross_bytes"] == 128' plan --src "$S" --dst "$D" --dtype float64 --json
expect_json "--dtype Float16 (MindSpore spelling)" 'j["cross_bytes"] == 32' plan --src "$S" --dst "$D" --dtype Float16 --json
expect_json "--summary drops the transfers" '"transfers" not in j and j["cross_bytes"] == 64' plan --src "$S" --dst "$D" --json --summary
expect_json "same layout: nothing crosses" 'j["cross_bytes"] == 0 and j["messages"] == 0 and j["local_bytes"] == 512' plan --src "$S" --dst "$S" --json

# the seed scenario (MindSpore tutorial): 784 x 512 weight, 8 ranks -> 4 with optimizer sharding
SS='{"dev_matrix":[2,1,2,2],"tensor_map":[2,1],"shape":[784,512]}'
SD='{"dev_matrix":[2,2,1],"tensor_map":[1,0],"shape":[784,512],"opt_shard":{"step":2,"size":2}}'
expect_json "seed 8 -> 4: minimal" 'j["cross_bytes"] == j["lower_bound_bytes"] == 802816 and j["local_bytes"] == 802816 and j["messages"] == 4' plan --src "$SS" --dst "$SD" --json
expect_json "seed 8 -> 4: target rank 1 holds rows 392:588" 'sorted((t["offset"], t["shape"]) for t in j["transfers"] if t["dst"] == 1) == [([392,0],[196,256]),([392,256],[196,256])]' plan --src "$SS" --dst "$SD" --json

# uneven, 8 -> 3
expect_json "uneven 8 -> 3: minimal and complete" 'j["cross_bytes"] == j["lower_bound_bytes"] and j["cross_bytes"] + j["local_bytes"] == 280' \
  plan --src '{"dev_matrix":[4,2],"tensor_map":[1,0],"shape":[10,7],"split":"chunk"}' \
       --dst '{"dev_matrix":[3],"tensor_map":[0,-1],"shape":[10,7],"split":"balanced"}' --json

# the text form
expect_text "text: transfer line" '^  4 -> 2    \[4:6,0:4\]     32  cross$' plan --src "$S" --dst "$D"
expect_text "text: local line" '^  0 -> 0    \[0:2,0:4\]     32  local$' plan --src "$S" --dst "$D"
expect_text "text: cross bytes" '^  cross-rank bytes  64 B in 2 messages$' plan --src "$S" --dst "$D"
expect_text "text: lower bound" '^  lower bound       64 B  \(cross-rank bytes == lower bound: minimal\)$' plan --src "$S" --dst "$D"
expect_text "text: sent per rank" '^  sent per source rank: max 32 B, mean 8 B$' plan --src "$S" --dst "$D"
expect_text "text: KiB" '802816 B \(784 KiB\) in 4 messages' plan --src "$SS" --dst "$SD" --summary

finish
