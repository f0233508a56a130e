"""What a party and the label holder keep on disk between the epochs of a run: plain-data state
(:mod:`verticalfs.persist.state`) in private files, and the party's answer to ``Persist``
(:mod:`verticalfs.persist.files`). It sits below :mod:`verticalfs.party` and the training loops."""
