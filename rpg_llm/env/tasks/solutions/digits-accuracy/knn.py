"""Digits: k nearest neighbours on the raw pixels, optionally on their first PCA components."""

import pandas as pd
from sklearn.decomposition import PCA
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

K = 3
N_COMPONENTS = None

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
pixels = [c for c in train.columns if c.startswith("pixel")]
steps = [] if N_COMPONENTS is None else [PCA(n_components=N_COMPONENTS, random_state=0)]
model = make_pipeline(*steps, KNeighborsClassifier(n_neighbors=K))
model.fit(train[pixels], train["label"])
sub = pd.DataFrame({"id": test["id"], "label": model.predict(test[pixels])})
sub.to_csv("submission.csv", index=False)
