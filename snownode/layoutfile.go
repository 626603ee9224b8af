package snownode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/leafmq/leafmq/internal/fsutil"
)

// layoutFileName is the file under DataDir/snowflake recording the layout
// (bits, unit and epoch) this data directory's ids were made with.
const layoutFileName = "layout"

// checkLayout refuses a snowflake layout other than the one recorded in the
// data directory: the same time maps to other bits under another epoch,
// unit or bit split, so ids made after such a change can equal ids made
// before it. The first start records it. A directory that cannot be written
// costs the check, with a warning (as for the other hints).
func (s *Server) checkLayout() error {
	path := filepath.Join(s.cfg.DataDir, "snowflake", layoutFileName)
	want := s.cfg.Layout.String()
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
		s.log.Warn("snowflake: cannot read the recorded layout", "path", path, "err", err)
		return nil
	}
	if err := fsutil.WriteFile(path, []byte(want+"\n")); err != nil {
		s.log.Warn("snowflake: cannot record the layout", "path", path, "err", err)
	}
	return nil
}
