#!/usr/bin/env bash
# Bad input: a non-zero exit code (2 usage, 1 bad input), nothing on stdout, one line on stderr
# naming the option and the reason; --help and --version succeed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"

L='{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4]}'
D='{"dev_matrix":[4],"tensor_map":[0,-1],"shape":[8,4]}'

# usage errors: 2
expect_error "no subcommand" 2 "a subcommand is required: layout, plan"
expect_error "unknown subcommand" 2 "unknown subcommand 'frob'" frob
expect_error "unknown option" 2 "unknown option '--bogus'" --bogus
expect_error "layout without --layout" 2 "--layout is required" layout
expect_error "--layout without a value" 2 "--layout" layout --layout
expect_error "plan without --dst" 2 "--dst is required" plan --src "$L"
expect_error "plan with an extra argument" 2 "--extra" plan --src "$L" --dst "$D" --extra
expect_error "unknown dtype" 2 'unknown dtype "float33" (valid: int8, uint8' plan --src "$L" --dst "$D" --dtype float33

# bad input: 1
expect_error "not JSON" 1 "--layout: invalid JSON: parse error at line 1, column" layout --layout '{"dev_matrix":[2,4]'
expect_error "not an object" 1 "--layout: a layout must be a JSON object" layout --layout '[2,4]'
expect_error "missing key" 1 '--layout: missing key "tensor_map"' layout --layout '{"dev_matrix":[2,4],"shape":[8,4]}'
expect_error "unknown key" 1 "--layout: unknown key 'tensor_shpae' (did you mean 'tensor_shape'?)" layout --layout '{"dev_matrix":[2,4],"tensor_map":[1,-1],"tensor_shpae":[8,4]}'
expect_error "string in dev_matrix" 1 '--layout: dev_matrix[1] must be an integer, got the string "4"' layout --layout '{"dev_matrix":[2,"4"],"tensor_map":[1,-1],"shape":[8,4]}'
expect_error "non-integer shape" 1 "--layout: shape[0] must be an integer, got the number 8.5" layout --layout '{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8.5,4]}'
expect_error "negative shape" 1 "--layout: shape[0] = -8 is invalid" layout --layout '{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[-8,4]}'
expect_error "zero devices" 1 "--layout: dev_matrix[0] = 0 is invalid" layout --layout '{"dev_matrix":[0,4],"tensor_map":[1,-1],"shape":[8,4]}'
expect_error "axis out of range" 1 "--layout: tensor_map[0] = 2 is invalid" layout --layout '{"dev_matrix":[2,4],"tensor_map":[2,-1],"shape":[8,4]}'
expect_error "axis used twice" 1 "device axis 1 splits both dim 0 and dim 1" layout --layout '{"dev_matrix":[2,4],"tensor_map":[1,1],"shape":[8,4]}'
expect_error "map length" 1 "--layout: tensor_map has 1 entry but shape [8,4] has 2 dims" layout --layout '{"dev_matrix":[2,4],"tensor_map":[1],"shape":[8,4]}'
expect_error "uneven in divisible mode" 1 "dim 0 of size 7 does not divide into 2 equal slices" layout --layout '{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[7,4]}'
expect_error "bad optimizer size" 1 "optimizer sharding size 3 does not divide the replica group size 4" layout --layout '{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"opt_shard":{"step":1,"size":3}}'
expect_error "bad split mode" 1 '--layout: split = "even" is not a split mode' layout --layout '{"dev_matrix":[2,4],"tensor_map":[1,-1],"shape":[8,4],"split":"even"}'
expect_error "too many devices" 1 "more than 2^31 devices" layout --layout '{"dev_matrix":[65536,65536],"tensor_map":[1,-1],"shape":[8,4]}'
expect_error "missing file" 1 "--layout: /nonexistent/l.json: cannot open for reading: No such file or directory" layout --layout @/nonexistent/l.json
expect_error "--src is named" 1 "--src: dev_matrix[0] = 0 is invalid" plan --src '{"dev_matrix":[0],"tensor_map":[0],"shape":[8]}' --dst "$D"
expect_error "--dst is named" 1 '--dst: missing key "shape"' plan --src "$L" --dst '{"dev_matrix":[4],"tensor_map":[0,-1]}'
printf '{"dev_matrix":[4],"tensor_map":[0,-1],"shape":[8,4],}' >"$tmp/bad.json"
expect_error "the file is named" 1 "--dst @$tmp/bad.json: invalid JSON" plan --src "$L" --dst "@$tmp/bad.json"
expect_error "different shapes" 1 "--src and --dst describe different tensors: shape [8,4] vs [8,8]" plan --src "$L" --dst '{"dev_matrix":[4],"tensor_map":[0,-1],"shape":[8,8]}'

# help and version
expect_text "--version" '^reshard [0-9]+\.[0-9]+\.[0-9]+$' --version
expect_text "--help lists the subcommands" '^  plan ' --help
expect_text "plan --help" '--dtype' plan --help
expect_text "layout --help" '--layout' layout --help

finish
