"""kdbert: knowledge distillation for BERT-family models."""

__version__ = "0.1.0"


def load(path, threads=None, batch_size=64):
    """A trained model or its export, ready to ``predict(texts_or_pairs)``
    (:func:`kdbert.deploy.predict.load`)."""
    from kdbert.deploy.predict import load as load_model

    return load_model(path, threads, batch_size)
