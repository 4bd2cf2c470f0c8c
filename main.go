// Command sitecon is the on-site agent and console of an EVE edge-node
// cluster. Its commands live in package cmd, one file per command.
package main

import "github.com/sitecon/sitecon/cmd"

func main() {
	cmd.Execute()
}
