#!/usr/bin/env python3
"""Writes the hand-derived ERNIE-4.5-VL cases (hand_ernie45vl_*) in the golden case format.

These are NOT transformers outputs (no transformers run was possible for ERNIE-4.5-VL here): the
ids are derived by hand from the rule as transformers 4.57 writes it
(src/transformers/models/ernie4_5_vl/modular_ernie4_5_vl.py, Ernie4_5_VLModel.get_rope_index);
the derivation of every case is in tests/kernels/multimodal_test.cc (ErnieHandMadeCases), which
holds the same numbers. Token ids: image 5, video 6, video start 7, video end 8; spatial merge 2,
temporal merge 2. Run with /usr/bin/python3 from this directory; the .npy files are committed.
"""
import json
import os

import numpy as np

SOURCE = ("huggingface/transformers src/transformers/models/ernie4_5_vl/modular_ernie4_5_vl.py "
          "@ 0220efad89cac3f256beb98808c4ec2325ad1928 (Ernie4_5_VLModel.get_rope_index)")
PARAMS = {"model": "ernie4_5_vl", "spatial_merge_size": 2, "temporal_merge_size": 2,
          "image_token_id": 5, "video_token_id": 6, "video_start_token_id": 7,
          "video_end_token_id": 8, "padding_position_value": 1}

CASES = {
    "hand_ernie45vl_one_video": dict(
        input_ids=[[1, 7] + [6] * 12 + [8, 2]], video_grid_thw=[[4, 4, 6]],
        position_ids=[[[0, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 5, 6]],
                      [[0, 1, 2, 2, 2, 3, 3, 3, 2, 2, 2, 3, 3, 3, 5, 6]],
                      [[0, 1, 2, 3, 4, 2, 3, 4, 2, 3, 4, 2, 3, 4, 5, 6]]],
        deltas=[[-9]]),
    "hand_ernie45vl_two_images_leftpad": dict(
        input_ids=[[0, 0, 1, 5, 5, 5, 5, 2, 5, 5, 3], [0, 0, 0, 0, 0, 1, 2, 3, 4, 9, 10]],
        attention_mask=[[0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]],
        image_grid_thw=[[1, 4, 4], [1, 2, 4]],
        position_ids=[[[1, 1, 0, 1, 1, 1, 1, 3, 4, 4, 6], [1, 1, 1, 1, 1, 0, 1, 2, 3, 4, 5]],
                      [[1, 1, 0, 1, 1, 2, 2, 3, 4, 4, 6], [1, 1, 1, 1, 1, 0, 1, 2, 3, 4, 5]],
                      [[1, 1, 0, 1, 2, 1, 2, 3, 4, 5, 6], [1, 1, 1, 1, 1, 0, 1, 2, 3, 4, 5]]],
        deltas=[[-4], [-5]]),
}
DECODE = ("hand_ernie45vl_decode_after_two_images", [[-4], [-5]], 11, 2,
          [[[7, 8], [6, 7]]] * 3)


def tensor(directory, name, value):
    array = np.asarray(value, dtype=np.int64)
    np.save(os.path.join(directory, name + ".npy"), array)
    return {"file": name + ".npy", "dtype": "<i8", "shape": list(array.shape)}


def write(name, function, params, inputs, outputs, notes):
    os.makedirs(name, exist_ok=True)
    case = {"name": name, "function": function, "params": params,
            "inputs": {k: tensor(name, k, v) for k, v in inputs.items()},
            "outputs": {k: tensor(name, k, v) for k, v in outputs.items()},
            "tolerance": {"exact": True}, "sources": [SOURCE], "provenance": "hand-derived",
            "notes": notes}
    with open(os.path.join(name, "case.json"), "w") as f:
        json.dump(case, f, indent=1)
        f.write("\n")


def main():
    for name, c in CASES.items():
        inputs = {k: c[k] for k in ("input_ids", "attention_mask", "image_grid_thw",
                                    "video_grid_thw") if k in c}
        write(name, "mrope_rope_index", PARAMS, inputs,
              {"position_ids": c["position_ids"], "mrope_position_deltas": c["deltas"]},
              "hand-derived from the rule (tests/kernels/multimodal_test.cc, ErnieHandMadeCases)")
    name, deltas, prompt_length, steps, ids = DECODE
    write(name, "mrope_decode_position_ids",
          {"model": "ernie4_5_vl", "prompt_length": prompt_length, "num_steps": steps},
          {"mrope_position_deltas": deltas}, {"position_ids": ids},
          "deltas of hand_ernie45vl_two_images_leftpad; prompt_length its padded S")


if __name__ == "__main__":
    main()
