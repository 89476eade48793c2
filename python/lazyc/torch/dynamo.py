"""torch.compile(model, backend="lazyc"): placeholder until the backend lands."""


def register():
    pass
