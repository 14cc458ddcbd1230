"""The model layer: multinomial naive Bayes over hashed token counts (`bayes`), the
estimators behind it (`estimation`) and the feature families that name and weigh
tokens (`families`).

No I/O and no state beyond arrays. May use `spamd.mail` (families tokenize), and
below it `spamd.runtime`, `spamd.config` and `spamd.errors`.
"""
