"""Employee attrition: the training share of each answer for every employee (the floor)."""

import pandas as pd

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
share = train["Attrition"].value_counts(normalize=True)
submission = pd.DataFrame({label: share[label] for label in sorted(share.index)}, index=test.index)
submission.insert(0, "id", test["id"])
submission.to_csv("submission.csv", index=False)
