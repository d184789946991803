package kubernetes

import (
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

// SeccompProfiles returns every Localhost profile the runner can name,
// by path relative to the kubelet's seccomp root (/var/lib/kubelet/seccomp)
// with dir as Config.SeccompDir: the runc and the gVisor profile of each
// effect set policy.Compile distinguishes. The cluster setup (or the
// installer DaemonSet) writes them on every node.
func SeccompProfiles(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	base := []tools.Effect{tools.EffectExec}
	for _, extra := range [][]tools.Effect{nil, {tools.EffectFileRead}, {tools.EffectFileWrite}, {tools.EffectHTTP},
		{tools.EffectFileRead, tools.EffectHTTP}, {tools.EffectFileWrite, tools.EffectHTTP}} {
		iso := policy.Compile(append(append([]tools.Effect(nil), base...), extra...)).Spec
		for _, p := range []bool{false, true} {
			s := iso.Seccomp
			if p {
				s = iso.SeccompGVisor
			}
			name, b, err := ProfileName(dir, s)
			if err != nil {
				return nil, err
			}
			out[name] = b
		}
	}
	return out, nil
}
