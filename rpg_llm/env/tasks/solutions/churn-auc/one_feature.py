"""Telecom churn: rank customers by one numeric column, signed by its training correlation."""

import numpy as np
import pandas as pd

FEATURE = "number_customer_service_calls"

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
sign = np.sign(np.corrcoef(train[FEATURE], train["churn"])[0, 1]) or 1.0
pd.DataFrame({"id": test["id"], "churn": sign * test[FEATURE]}).to_csv(
    "submission.csv", index=False
)
