"""Fine-food reviews: the training share of "great" reviews for every review (AUC 0.5)."""

import pandas as pd

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
sub = pd.DataFrame({"id": test["id"], "great": train["great"].mean()})
sub.to_csv("submission.csv", index=False)
