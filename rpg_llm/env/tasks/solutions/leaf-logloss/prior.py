"""Leaf species: predict the training class frequencies for every leaf."""

import pandas as pd

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
prior = train["species"].value_counts(normalize=True).sort_index()
sub = pd.DataFrame([prior.to_numpy()] * len(test), columns=prior.index)
sub.insert(0, "id", test["id"])
sub.to_csv("submission.csv", index=False)
