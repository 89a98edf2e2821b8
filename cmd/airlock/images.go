package main

import (
	"github.com/spf13/cobra"

	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/images"
)

func newImagesCmd() *cobra.Command {
	var dir string
	var keep int64
	var asJSON bool
	cmd := &cobra.Command{Use: "images", Short: "List and prune the runner's image cache (images pulled for jobs)"}
	cmd.PersistentFlags().StringVar(&dir, "cache-dir", images.DefaultStoreDir, "the image cache's directory")
	ls := &cobra.Command{
		Use: "ls", Short: "List the cached images, the most recently used first", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return images.WriteListing(c.OutOrStdout(), dir, asJSON) },
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print the images as JSON")
	prune := &cobra.Command{
		Use: "prune [--keep SIZE]", Short: "Remove the cached images no job runs on, the least recently used first, until the cache holds at most --keep", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return images.PruneCache(c.OutOrStdout(), dir, keep) },
	}
	prune.Flags().Var(policies.NewSizeFlag(&keep, 0), "keep", "what the cache may keep (e.g. 10G): the most recently used images that fit; 0: none but those in use")
	cmd.AddCommand(ls, prune)
	return cmd
}
