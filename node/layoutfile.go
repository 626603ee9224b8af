package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/leafmq/leafmq/internal/fsutil"
	"github.com/leafmq/leafmq/snowflake"
)

// layoutFileName is the file under DataDir/snowflake recording the layout
// (bits, unit and epoch) this data directory's ids were made with.
const layoutFileName = "layout"

// checkLayout refuses a snowflake layout other than the one recorded in the
// data directory: the same time maps to other bits under another epoch,
// unit or bit split, so ids made after such a change can equal ids made
// before it. The first start records it. A directory that cannot be written
// costs the check, with a warning (as for the other hints).
func (n *Node) checkLayout(layout snowflake.Layout) error {
	path := filepath.Join(n.cfg.DataDir, "snowflake", layoutFileName)
	want := layout.String()
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if got := strings.TrimSpace(string(b)); got != want {
			return fmt.Errorf("%w: the snowflake layout was %q in %s and is now %q: ids made after such a change can equal earlier ones; "+
				"go back to the recorded layout, or start a new id space with a new data directory and worker registry",
				ErrConfig, got, path, want)
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		n.log.Warn("snowflake: cannot read the recorded layout", "path", path, "err", err)
		return nil
	}
	if err := fsutil.WriteFile(path, []byte(want+"\n")); err != nil {
		n.log.Warn("snowflake: cannot record the layout", "path", path, "err", err)
	}
	return nil
}
