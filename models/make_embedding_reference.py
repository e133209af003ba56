"""The final hidden states of a tiny test model by transformers, for the embeddings tests: the
output of the last norm (hidden_states[-1]) for each token of the fixture's reference.json tokens,
and its mean-pooled and last-token embeddings, L2-normalised as llama-server normalises them.
Writes hidden.json beside reference.json. Run with a venv that has torch and transformers:

    /tmp/ref/bin/python models/make_embedding_reference.py tests/fixtures/models/llama-gqa-tied
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM


def main() -> None:
    root = Path(sys.argv[1])
    ref = json.loads((root / "reference.json").read_text())
    tokens = ref["tokens"][:16]
    model = AutoModelForCausalLM.from_pretrained(root / "hf", dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(torch.tensor([tokens]), output_hidden_states=True)
    hidden = out.hidden_states[-1][0].double().numpy()  # after the final norm
    mean = hidden.mean(axis=0)
    last = hidden[-1]
    out_json = {
        "description": "transformers " + transformers.__version__ + ": hidden_states[-1] (after the final norm) "
                       "of the first 16 reference tokens; mean and last pooling, L2-normalised",
        "tokens": tokens,
        "hidden": hidden.astype(np.float32).tolist(),
        "mean_l2": (mean / np.linalg.norm(mean)).astype(np.float32).tolist(),
        "last_l2": (last / np.linalg.norm(last)).astype(np.float32).tolist(),
    }
    (root / "hidden.json").write_text(json.dumps(out_json))


if __name__ == "__main__":
    main()
