#!/usr/bin/env bash
# Replacing a Hugging Face checkpoint with --force is atomic (issue "Hostile input, round two",
# row 7): killed at any moment, the directory holds the old checkpoint or the new one, complete,
# as a loader sees it, with the user's other files (config.json, the tokenizer, a subdirectory, a
# symlink) untouched.
#
# For each shape of replacement (sharded -> sharded with another shard count, sharded -> sharded
# with the same names, one file -> sharded, sharded -> one file, one file -> one file), a plain
# run under strace counts every call the --force run makes of rename, renameat, renameat2, unlink,
# unlinkat, rmdir, link, linkat, mkdir and mkdirat; then, for each of those syscalls and each
# N = 1 .. its count, the run is killed by strace at the N-th call of it (-e inject=SYSCALL:
# signal=SIGKILL:when=N; strace counts each syscall on its own, so these are every call of the
# run, once each). After every kill:
#   * `reshard inspect DIR` reads the directory (reshard's own reader, which refuses an index
#     beside an unlisted model.safetensors);
#   * an independent reader (verify/python/hf_reference.py, with the same ambiguity rule) finds
#     exactly the old checkpoint's tensors or exactly the new one's (SHA-256 of every tensor), and
#     the directory's files besides the user's and reshard's temporaries (`*.reshard-<pid>.*`) are
#     exactly that checkpoint's files; where the run writes a manifest into the directory, every
#     file it lists is there with its SHA-256 (a manifest never describes the other checkpoint);
#   * the user's files are the same files (inode and content), the symlink the same link;
#   * a rerun with --force finishes the job: the new checkpoint, the user's files still the same
#     inodes, no temporary left in or beside the directory.
# Each shape must see both outcomes (old before the swap, new after it), and the number of kill
# points must be above zero. No timers: strace kills at a call number. The runs killed are
# --no-sync (a kill is not a power cut: the calls are the same, the runs four times as fast).
#
# Then the fallback (renameat2's RENAME_EXCHANGE refused, EINVAL as on NFS; hard links refused,
# EPERM): the replacement is made in place, the run succeeds with a warning saying so, and the
# result is the new checkpoint with the user's files; the same when the directory is a mount
# point (a tmpfs in a private mount namespace; skipped, loudly, where there is none); and a
# directory with only config.json (no old checkpoint) is written in place, with no swap.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.bash"
PYDIR="$SRC/verify/python"
calls=rename,renameat,renameat2,unlink,unlinkat,rmdir,link,linkat,mkdir,mkdirat

if ! strace -f -qq -o /dev/null -e trace=rename true 2>"$tmp/strace.err"; then
  fail "strace cannot trace here (it is a dependency: scripts/install-deps.sh)" "$(cat "$tmp/strace.err")"
  finish
  exit 1
fi

# two models with the same tensors and other values: A (the old checkpoints), B (the new ones)
"$PY" "$PYDIR/hf_reference.py" make "$tmp/A" --seed 1 --max-shard-size 40000 >/dev/null
"$PY" "$PYDIR/hf_reference.py" make "$tmp/B" --seed 2 --max-shard-size 40000 >/dev/null

# the checker: reads "DIR<TAB>OLD_REF<TAB>NEW_REF" lines, answers a line of three fields,
# "VERDICT<TAB>USER<TAB>LEFTOVERS": VERDICT "old", "new" or "problem: ..."; USER the user's files
# (inode and SHA-256 of each, the symlink's target); LEFTOVERS reshard's temporaries in DIR and
# beside it
cat >"$tmp/check.py" <<'EOF'
import hashlib, json, os, re, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import hf_reference as hf

USER = {"config.json", "tokenizer.json", "extra", "link.json"}
TEMPORARY = re.compile(r"\.reshard-[0-9]+\.")

def tensors(d):
    names = set(os.listdir(d))
    if hf.INDEX in names and hf.SINGLE in names:
        if hf.SINGLE not in hf.read_index(d)["weight_map"].values():
            raise hf.HFError("both %s and an unlisted %s: ambiguous" % (hf.INDEX, hf.SINGLE))
    return {n: [t, s, hashlib.sha256(c).hexdigest()] for n, (t, s, c) in hf.read_model(d).items()}

def ckpt_files(d):
    return sorted(f for f in os.listdir(d) if f not in USER and not TEMPORARY.search(f))

def manifest_problems(d):
    m = os.path.join(d, "m.json")
    if not os.path.exists(m):
        return []
    p = []
    for f in json.load(open(m))["files"]:
        path = os.path.join(d, f["path"])
        if not os.path.isfile(path):
            p.append("the manifest lists %s, which is not there" % f["path"])
        elif hashlib.sha256(open(path, "rb").read()).hexdigest() != f["sha256"]:
            p.append("the manifest's SHA-256 of %s is another file's" % f["path"])
    return p

def user_files(d):
    out = []
    for f in ("config.json", "tokenizer.json", "extra/notes.txt"):
        path = os.path.join(d, f)
        try:
            out.append("%s %d %s" % (f, os.lstat(path).st_ino, hashlib.sha256(open(path, "rb").read()).hexdigest()))
        except OSError as e:
            out.append("%s: %s" % (f, e.strerror))
    try:
        out.append("link.json -> " + os.readlink(os.path.join(d, "link.json")))
    except OSError as e:
        out.append("link.json: %s" % e.strerror)
    return ", ".join(out)

def leftovers(d):
    return " ".join(sorted(os.path.join(p, f) for p in (d, os.path.dirname(d)) if os.path.isdir(p)
                           for f in os.listdir(p) if ".reshard-" in f))

refs = {}
for line in sys.stdin:
    d, old, new = line.rstrip("\n").split("\t")
    verdict = None
    try:
        for r in (old, new):
            if r not in refs:
                refs[r] = (tensors(r), ckpt_files(r))
        got = tensors(d)
        verdict = next((label for label, r in (("old", old), ("new", new)) if got == refs[r][0]), None)
        if verdict is None:
            raise hf.HFError("the tensors are neither the old checkpoint's nor the new one's")
        files = ckpt_files(d)
        want = refs[old if verdict == "old" else new][1]
        if files != want:
            raise hf.HFError("the %s checkpoint, but the files %s, expected %s" % (verdict, files, want))
        p = manifest_problems(d)
        if p:
            raise hf.HFError("; ".join(p))
    except Exception as e:  # any reading failure is the finding
        verdict = "problem: %s: %s" % (type(e).__name__, str(e).replace("\t", " "))
    print("%s\t%s\t%s" % (verdict, user_files(d), leftovers(d)), flush=True)
EOF
coproc CHECK { "$PY" "$tmp/check.py" "$PYDIR"; }
# check DIR OLD_REF NEW_REF: sets verdict, user (the user's files) and leftovers
check() {
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >&"${CHECK[1]}"
  IFS=$'\t' read -r verdict user leftovers <&"${CHECK[0]}" || verdict="problem: the checker ended"
}

# shape NAME OLD_SIZE NEW_SIZE [--manifest]: the old checkpoint (A at OLD_SIZE) with the user's
# files, replaced by B at NEW_SIZE; sizes as --max-shard-size, "" for the default (one file)
total_points=0
shape() {
  local name=$1 old_size=$2 new_size=$3 manifest=${4:-} w=$tmp/$1
  local -a old_args=(--format hf) new_args=(--format hf --force)
  [[ -n $old_size ]] && old_args+=(--max-shard-size "$old_size")
  [[ -n $new_size ]] && new_args+=(--max-shard-size "$new_size")
  mkdir -p "$w"
  # the references: the old and the new checkpoint alone, written the same way
  run convert --in "$tmp/A" --out "$w/old_ref" "${old_args[@]}" ${manifest:+--manifest "$w/old_ref/m.json"}
  [[ $rc -eq 0 ]] || { fail "$name: the old reference" "$err"; return; }
  run convert --in "$tmp/B" --out "$w/new_ref" "${new_args[@]}" ${manifest:+--manifest "$w/new_ref/m.json"}
  [[ $rc -eq 0 ]] || { fail "$name: the new reference" "$err"; return; }
  # the template: the old checkpoint and the user's files
  cp -a "$w/old_ref" "$w/template"
  echo '{"architectures": ["X"]}' >"$w/template/config.json"
  echo '{"model": {"type": "BPE"}}' >"$w/template/tokenizer.json"
  mkdir "$w/template/extra" && echo "notes" >"$w/template/extra/notes.txt"
  ln -s config.json "$w/template/link.json"

  # fresh: a copy of the template in its own parent (the old checkpoint); sets dir and before
  local n_run=0
  fresh() {
    n_run=$((n_run + 1))
    dir=$w/run$n_run/out
    mkdir -p "$w/run$n_run"
    cp -a "$w/template" "$dir"
    check "$dir" "$w/old_ref" "$w/new_ref"
    before=$user
    [[ $verdict == old && -z $leftovers ]] || fail "$name: the copy of the old checkpoint reads as it" "$verdict"
  }
  # the --force run onto $dir, as killed: --no-sync (a kill is not a power cut; the calls killed
  # at are the same, and the runs four times as fast)
  replace() {
    "$RESHARD" convert --in "$tmp/B" --out "$dir" "${new_args[@]}" --no-sync ${manifest:+--manifest "$dir/m.json"}
  }

  # negative controls: the checks notice neither checkpoint, a new shard among the old ones, and
  # a user's file replaced by a copy
  local f
  fresh
  rm -f "$dir/model.safetensors.index.json" "$dir/model.safetensors"
  check "$dir" "$w/old_ref" "$w/new_ref"
  if [[ $verdict == problem:* ]]; then pass; else fail "$name: the check must notice a directory without a checkpoint"; fi
  fresh
  f=$(cd "$w/new_ref" && ls -- *.safetensors | head -1)
  cp "$w/new_ref/$f" "$dir/$f"
  check "$dir" "$w/old_ref" "$w/new_ref"
  if [[ $verdict == problem:* || $f == model.safetensors && $verdict == new ]]; then pass; else
    fail "$name: the check must notice the new $f among the old files" "$verdict"
  fi
  fresh
  cp "$dir/config.json" "$dir/copy" && mv "$dir/copy" "$dir/config.json"
  check "$dir" "$w/old_ref" "$w/new_ref"
  if [[ $user != "$before" ]]; then pass; else fail "$name: the check must notice config.json replaced by a copy"; fi
  rm -rf "$w"/run*

  # count the calls of an uninterrupted run
  fresh
  strace -f -qq -o "$w/count.log" -e trace="$calls" "$RESHARD" convert --in "$tmp/B" --out "$dir" "${new_args[@]}" \
    --no-sync ${manifest:+--manifest "$dir/m.json"} >/dev/null 2>"$w/count.err" || {
    fail "$name: the uninterrupted run under strace" "$(cat "$w/count.err")"
    return
  }
  check "$dir" "$w/old_ref" "$w/new_ref"
  if [[ $verdict == new && $user == "$before" && -z $leftovers ]]; then pass; else
    fail "$name: the uninterrupted run: the new checkpoint, the user's files the same, nothing left over" \
      "checker: $verdict" "leftovers: $leftovers" "user's files: $user" "were: $before"
  fi
  local -A count=()
  local sc line
  while IFS= read -r line; do
    [[ $line =~ ^[0-9]+\ +([a-z0-9]+)\( ]] || continue
    sc=${BASH_REMATCH[1]}
    count[$sc]=$((${count[$sc]:-0} + 1))
  done <"$w/count.log"
  if [[ ${count[renameat2]:-0} -eq 1 ]]; then pass; else
    fail "$name: one renameat2 (the swap)" "calls: $(for k in "${!count[@]}"; do printf '%s=%s ' "$k" "${count[$k]}"; done)"
  fi

  # kill at every call
  local -A seen=()
  local points=0 n status
  for sc in "${!count[@]}"; do
    for ((n = 1; n <= count[$sc]; n++)); do
      points=$((points + 1))
      fresh
      status=0
      (strace -f -qq -o /dev/null -e trace="$sc" -e inject="$sc:signal=SIGKILL:when=$n" \
        "$RESHARD" convert --in "$tmp/B" --out "$dir" "${new_args[@]}" --no-sync ${manifest:+--manifest "$dir/m.json"} \
        >/dev/null 2>&1
        exit $?
      ) 2>/dev/null || status=$?  # (a subshell, 2>: no "Killed" notice)
      local at="$name: killed at $sc call $n of ${count[$sc]}"
      if [[ $status -ne 137 ]]; then
        fail "$at: the run is killed" "exit status $status"
        continue
      fi
      run inspect "$dir"
      if [[ $rc -eq 0 ]]; then pass; else fail "$at: reshard reads the directory" "exit $rc" "$err"; fi
      check "$dir" "$w/old_ref" "$w/new_ref"
      seen[$verdict]=1
      if [[ $verdict == old || $verdict == new ]]; then pass; else fail "$at: the old or the new checkpoint, complete" "$verdict"; fi
      if [[ $user == "$before" ]]; then pass; else
        fail "$at: the user's files are the same files" "now: $user" "were: $before"
      fi
      # the rerun finishes the job
      replace >/dev/null 2>"$w/rerun.err" && rc=0 || rc=$?
      check "$dir" "$w/old_ref" "$w/new_ref"
      if [[ $rc -eq 0 && $verdict == new && $user == "$before" && -z $leftovers ]]; then pass; else
        fail "$at: the rerun with --force: the new checkpoint, the user's files the same, nothing left over" \
          "exit $rc: $(cat "$w/rerun.err")" "checker: $verdict" "leftovers: $leftovers" "user's files: $user"
      fi
      rm -rf "$w/run$n_run"
    done
  done
  if [[ $points -gt 0 && -n ${seen[old]:-} && -n ${seen[new]:-} ]]; then pass; else
    fail "$name: kill points found ($points) and both outcomes seen (old: ${seen[old]:-no}, new: ${seen[new]:-no})"
  fi
  total_points=$((total_points + points))
  echo "$name: $points kill points ($(for k in "${!count[@]}"; do printf '%s %s, ' "$k" "${count[$k]}"; done | sed 's/, $//'))"

  # the fallback: no RENAME_EXCHANGE (EINVAL), no hard links (EPERM): in place, with a warning
  # (these runs, and the last one below, with the fsyncs)
  local fault
  for fault in renameat2:error=EINVAL link:error=EPERM; do
    fresh
    strace -f -qq -o /dev/null -e trace="${fault%%:*}" -e inject="$fault" \
      "$RESHARD" convert --in "$tmp/B" --out "$dir" "${new_args[@]}" ${manifest:+--manifest "$dir/m.json"} \
      >/dev/null 2>"$w/fallback.err" && rc=0 || rc=$?
    check "$dir" "$w/old_ref" "$w/new_ref"
    if [[ $rc -eq 0 && $verdict == new && $user == "$before" && -z $leftovers ]] &&
      grep -q "warning: hf: .*: the old checkpoint replaced in place, not atomically" "$w/fallback.err"; then pass; else
      fail "$name: $fault: replaced in place, with a warning" "exit $rc: $(cat "$w/fallback.err")" "checker: $verdict" \
        "leftovers: $leftovers" "user's files: $user"
    fi
  done
  rm -rf "$w"
}

shape "sharded 3 -> sharded 7" 40000 20000 --manifest
shape "sharded 3 -> sharded 3 (the same names)" 40000 40000
shape "one file -> sharded 7" "" 20000
shape "sharded 3 -> one file" 40000 ""
shape "one file -> one file" "" ""
if [[ $total_points -gt 0 ]]; then pass; else fail "no kill point at all"; fi
echo "$total_points kill points in all"

# no old checkpoint (only config.json): written in place, no swap, no warning
d=$tmp/fresh/out
mkdir -p "$d" && echo '{}' >"$d/config.json"
ino=$(stat -c %i "$d")
strace -f -qq -o "$tmp/fresh.log" -e trace=renameat2,mkdir "$RESHARD" convert --in "$tmp/B" --out "$d" --format hf \
  --max-shard-size 20000 --force >/dev/null 2>"$tmp/fresh.err" && rc=0 || rc=$?
if [[ $rc -eq 0 && ! -s $tmp/fresh.err && $(stat -c %i "$d") == "$ino" ]] && ! grep -q 'renameat2\|mkdir' "$tmp/fresh.log"; then
  pass
else
  fail "--force onto a directory with no checkpoint: in place, no swap" "exit $rc: $(cat "$tmp/fresh.err")" "$(cat "$tmp/fresh.log")"
fi

# the output directory a mount point (a tmpfs in a private mount namespace): no swap across
# filesystems, so in place, with a warning naming why
d=$tmp/mounted/out
mkdir -p "$d"
if unshare -m --propagation private bash -c 'mount -t tmpfs reshard-test "$1"' _ "$d" 2>/dev/null; then
  verdict_line=$(unshare -m --propagation private bash -c '
    set -e
    mount -t tmpfs reshard-test "$2"
    "$1" convert --in "$3/A" --out "$2" --format hf --max-shard-size 40000 >/dev/null
    echo "{}" >"$2/config.json"
    "$1" convert --in "$3/B" --out "$2" --format hf --max-shard-size 20000 --force 2>&1 >/dev/null
    "$4" "$5/hf_reference.py" check "$2" | sha256sum
    ls -A "$2" | paste -sd" " -' _ "$RESHARD" "$d" "$tmp" "$PY" "$PYDIR" 2>&1) || true
  want=$("$PY" "$PYDIR/hf_reference.py" check "$tmp/B" | sha256sum)
  if grep -q "warning: hf: .*: the old checkpoint replaced in place, not atomically (it is a mount point)" <<<"$verdict_line" &&
    grep -qF "$want" <<<"$verdict_line" && grep -q "config.json" <<<"$verdict_line"; then
    pass
  else
    fail "--force onto a mount point: in place, with a warning" "$verdict_line"
  fi
else
  echo "SKIPPED: --force onto a mount point: this machine allows no mount namespace (unshare -m + mount)" | tee /dev/stderr
fi

finish
