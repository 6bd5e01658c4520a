"""fp16 dynamic loss scaling, DeepSpeed's and the worker's semantics
(proto/zerostate/v1/config.proto, LossScaling): a step whose gradients hold
a non-finite value is skipped and, after `hysteresis` such steps, the scale
is multiplied by backoff_factor (not below min_scale); after growth_interval
clean steps it is multiplied by growth_factor. Kept by the coordinator."""


class LossScaler:
    def __init__(self, loss_scaling):
        self.config = loss_scaling  # a LossScaling as a dict (proto JSON names)
        self.scale = float(loss_scaling.get("initial_scale", 65536.0))
        self.good_steps = 0
        self.hysteresis = int(loss_scaling.get("hysteresis", 1))

    def update(self, overflow):
        """The scale after a step with or without overflow."""
        ls = self.config
        if ls.get("static_scale"):
            return self.scale
        if overflow:
            self.good_steps = 0
            self.hysteresis -= 1
            if self.hysteresis <= 0:
                self.hysteresis = int(ls.get("hysteresis", 1))
                self.scale = max(self.scale * ls.get("backoff_factor", 0.5),
                                 ls.get("min_scale", 1.0))
            return self.scale
        self.good_steps += 1
        if self.good_steps >= int(ls.get("growth_interval", 1000)):
            self.good_steps = 0
            self.scale *= ls.get("growth_factor", 2.0)
        return self.scale

    def state(self):
        return {"loss_scale": self.scale, "good_steps": self.good_steps,
                "hysteresis": self.hysteresis}

    def load(self, state):
        self.scale = state["loss_scale"]
        self.good_steps = state["good_steps"]
        self.hysteresis = state["hysteresis"]
