#!/usr/bin/env bash
# Makes the pictures and tables of README's "What an encoding guarantees" (issue #22) with the
# `posenc analyze` CLI against a local posenc-server, into docs/analysis/:
#   Llama 3.1 8B (meta-llama-3.1-8b.config.json: the "config" of tests/hf_configs' copy, RoPE
#   base 500000, d 128, llama3 scaling x8 from 8192), a sinusoidal table (d 512, base 10000) and
#   causal ALiBi (8 heads).
#
#   docs/analysis/make_pictures.sh [BUILD_DIR]     (default build/release; needs posenc and
#                                                   posenc-server built there)
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build/release}"
out=docs/analysis
llama="$out/meta-llama-3.1-8b.config.json"
# shellcheck source=tests/local_server.sh
source tests/local_server.sh
start_local_server "$build"
socket="$local_server"

analyze() {
  echo "posenc analyze $*" >&2
  "$build/posenc" --server "$socket" analyze "$@"
}

# Uniqueness and bounds: text (the first bf16 collision too).
{
  echo "\$ posenc analyze --encoding rope --hf-config $llama --count 131072 --collision bfloat16 --properties uniqueness,bounds"
  analyze --encoding rope --hf-config "$llama" --count 131072 --collision bfloat16 \
    --properties uniqueness,bounds
  echo
  echo "\$ posenc analyze --encoding sinusoidal --dim 512 --count 8192 --collision bfloat16 --properties uniqueness,bounds"
  analyze --encoding sinusoidal --dim 512 --count 8192 --collision bfloat16 \
    --properties uniqueness,bounds
  echo
  echo "\$ posenc analyze --encoding alibi --heads 8 --count 4096 --collision bfloat16 --properties uniqueness,bounds,relative"
  analyze --encoding alibi --heads 8 --count 4096 --collision bfloat16 \
    --properties uniqueness,bounds,relative
} >"$out/uniqueness_bounds.txt"

# Relative structure: the residual of the best rotation per distance.
analyze --encoding rope --hf-config "$llama" --count 131072 --properties relative \
  --png "$out/llama31_relative.png" >/dev/null
analyze --encoding sinusoidal --dim 512 --count 8192 --properties relative \
  --png "$out/sinusoidal_relative.png" >/dev/null
# Decay: RoPE's mean |q.k| and RoFormer bound; ALiBi's bias per head.
analyze --encoding rope --hf-config "$llama" --count 131072 --properties decay \
  --png "$out/llama31_decay.png" >/dev/null
analyze --encoding alibi --heads 8 --count 4096 --properties decay \
  --png "$out/alibi_decay.png" >/dev/null
# Extrapolation: llama3 scaling against the unscaled config, past the trained 8192.
analyze --encoding rope --hf-config "$llama" --count 131072 --properties extrapolation \
  --png "$out/llama31_extrapolation.png" >/dev/null
# Similarity: the cosine-similarity matrix over a window.
analyze --encoding rope --hf-config "$llama" --count 4096 --properties similarity --window 4096 \
  --max-cells 256 --png "$out/llama31_similarity.png" >/dev/null
analyze --encoding sinusoidal --dim 512 --count 1024 --properties similarity --window 1024 \
  --max-cells 256 --png "$out/sinusoidal_similarity.png" >/dev/null
ls -l "$out"
