"""PyTorch Lightning Trainer on a small MLP with a synthetic DataLoader."""

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def training_step(self, batch, _idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)


data = TensorDataset(torch.randn(100_000, 32), torch.randn(100_000, 1))
trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=100_000, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Net(), DataLoader(data, batch_size=16))
