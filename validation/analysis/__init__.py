"""Analysis of captures, one module per purpose: fitted pieces shared by the others
(:mod:`.fits`), predicted vs measured (:mod:`.validate`), where the residual comes from
(:mod:`.residuals`), model insertion on real data (:mod:`.insertion`), and planner pools
built from captures (:mod:`.pool`). Import the module you need: the package loads nothing
itself (a command that reads one analysis does not load them all, scipy.stats included)."""
