"""torchhpc.envs: Gymnasium environments (registered under the ``torchhpc/`` namespace).

    import gymnasium as gym
    import torchhpc.envs  # registers the ids below
    env = gym.make("torchhpc/BatchScheduling-v0", trace="lublin_256.swf")
"""

import gymnasium as gym

gym.register(id="torchhpc/BatchScheduling-v0", entry_point="torchhpc.envs.sched:BatchSchedulingEnv")
