"""An HF model built from a catalog config (Qwen2.5-0.5B shrunk to a tiny size, random weights and
data, no download), trained with the HF Trainer on CPU for 2 steps.

    memdoc diagnose examples/hf_trainer.py
"""

import tempfile

import torch
from _tiny_hf import random_batch, tiny_model
from transformers import Trainer, TrainingArguments

BATCH, SEQ = 2, 32


class RandomTokens(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        b = random_batch(1, SEQ, seed=i)
        return {"input_ids": b["input_ids"][0], "labels": b["labels"][0]}


def main() -> None:
    model = tiny_model()
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            use_cpu=True,
            max_steps=2,
            per_device_train_batch_size=BATCH,
            learning_rate=1e-4,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
        )
        Trainer(model=model, args=args, train_dataset=RandomTokens()).train()
    print("training done")


if __name__ == "__main__":
    main()
