"""ICAFS (icafs.md), in progress: so far the mode-specific normalisation of its synthesis stage
(:mod:`.transform`), its conditional vectors and gradient penalty (:mod:`.sampling`), the
conditional generator and critic with one party's WGAN-GP step (:mod:`.networks`) and the ensemble
of gated selectors of its stages 2-3 (:mod:`.gates`). No method is registered yet."""
