"""Hugging Face Trainer on a tiny BERT built from a config: synthetic tokens, no download."""

import tempfile

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (16,), generator=g), "labels": torch.tensor(i % 2)}


config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32)
model = BertForSequenceClassification(config)
args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=8, max_steps=100_000,
                         report_to=[], save_strategy="no", logging_steps=10_000, use_cpu=True,
                         dataloader_num_workers=0, disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=Tokens()).train()
