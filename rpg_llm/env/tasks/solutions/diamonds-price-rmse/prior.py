"""Diamond prices: the geometric mean training price for every diamond."""

import numpy as np
import pandas as pd

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
price = float(np.exp(np.log(train["price"]).mean()))
pd.DataFrame({"id": test["id"], "price": price}).to_csv("submission.csv", index=False)
