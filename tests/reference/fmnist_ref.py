"""PyTorch definitions of the `lazyc train` models that are not among the
zoo's ten reference models (shared by model_parity.py, gen_model_names.py
and bench/train_fmnist_torch.py)."""
import torchvision
from torch import nn


def make_resnet18_fmnist():
    """lazyc's resnet18_fmnist (models/resnet.c): torchvision's resnet18 for
    1x28x28 images and 10 classes, with the stem CIFAR ResNets use, a 3x3
    stride-1 conv and no max-pool (the ImageNet stem would leave 7x7 pixels
    for the first stage). The stem is re-initialised as ResNet.__init__
    initialises every conv (Kaiming normal, fan out), which lazyc does too;
    the state_dict keys are torchvision's resnet18's."""
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    model.maxpool = nn.Identity()
    return model
