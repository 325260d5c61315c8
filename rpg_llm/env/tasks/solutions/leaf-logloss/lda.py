"""Leaf species: linear discriminant analysis with shrinkage on the scaled numeric features."""

import pandas as pd
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

SHRINKAGE = 0.1

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
numeric = [c for c in train.select_dtypes(include="number").columns if c != "id"]
model = make_pipeline(
    StandardScaler(), LinearDiscriminantAnalysis(solver="lsqr", shrinkage=SHRINKAGE)
)
model.fit(train[numeric], train["species"])
sub = pd.DataFrame(model.predict_proba(test[numeric]), columns=model.classes_)
sub.insert(0, "id", test["id"])
sub.to_csv("submission.csv", index=False)
