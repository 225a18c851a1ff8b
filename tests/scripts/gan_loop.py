"""A GAN-shaped loop: a DataLoader, two optimizers (D then G) per iteration, .item() logging."""

import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(4096, 8)), batch_size=16)
netG, netD = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
optD = torch.optim.Adam(netD.parameters(), lr=1e-3)
optG = torch.optim.Adam(netG.parameters(), lr=1e-3)
bce = torch.nn.BCEWithLogitsLoss()
for _epoch in range(1000):
    for (real,) in loader:
        netD.zero_grad()
        fake = netG(torch.randn(real.shape[0], 4))
        errD = bce(netD(real), torch.ones(real.shape[0], 1)) + bce(netD(fake.detach()), torch.zeros(real.shape[0], 1))
        errD.backward()
        optD.step()
        netG.zero_grad()
        errG = bce(netD(fake), torch.ones(real.shape[0], 1))
        errG.backward()
        optG.step()
        print(f"{errD.item():.3f} {errG.item():.3f}")
