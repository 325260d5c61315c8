"""Digits: multinomial logistic regression on pixels scaled to [0, 1], optionally on PCA
components."""

import pandas as pd
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

C = 1.0
N_COMPONENTS = None

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
pixels = [c for c in train.columns if c.startswith("pixel")]
steps = [] if N_COMPONENTS is None else [PCA(n_components=N_COMPONENTS, random_state=0)]
model = make_pipeline(*steps, LogisticRegression(C=C, max_iter=2000))
model.fit(train[pixels] / 16.0, train["label"])
sub = pd.DataFrame({"id": test["id"], "label": model.predict(test[pixels] / 16.0)})
sub.to_csv("submission.csv", index=False)
