package runnersim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// Response is prepare_job's response as the runner reads it
// (HookResponse.cs: PrepareJobResponse); pointers tell a null from a
// missing value.
type Response struct {
	State   json.RawMessage `json:"state"`
	Context *struct {
		Container *struct {
			ID      *string `json:"id"`
			Network *string `json:"network"`
		} `json:"container"`
		Services json.RawMessage `json:"services"`
	} `json:"context"`
	IsAlpine *bool `json:"isAlpine"`
}

// ResponseService is one entry of context.services.
type ResponseService struct {
	ID      string             `json:"id"`
	Network string             `json:"network"`
	Ports   *map[string]string `json:"ports"`
}

// Services are the response's services (none when it has none).
func (r Response) Services() []ResponseService {
	var list []ResponseService
	if r.Context != nil {
		json.Unmarshal(r.Context.Services, &list)
	}
	return list
}

// ReadResponse reads a response file the way the runner does
// (ContainerHookManager.GetResponse and UpdateJobContext) and fails where
// the runner would: no file or an empty one for a job with a container,
// isAlpine missing, a state that is not an object (SaveHookState keeps
// the old one), services null, more of them than were asked for, or one
// with null ports (the runner iterates them without a null check).
// Encoding/json, like Newtonsoft, matches names without regard to case.
// The runner deletes the file once read; so does ReadResponse.
func ReadResponse(path string, hasContainer bool, services int) (Response, error) {
	var r Response
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		if hasContainer {
			return r, fmt.Errorf("response file is required but not found or empty: %v", err)
		}
		return r, nil
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("response %q: %v", b, err)
	}
	os.Remove(path)
	switch {
	case hasContainer && r.IsAlpine == nil:
		return r, fmt.Errorf("the property 'isAlpine' is required but was not found in the response file: %s", b)
	case len(r.State) == 0 || r.State[0] != '{':
		return r, fmt.Errorf("state is not an object: %s", b)
	case r.Context == nil:
		return r, nil // the runner sets no job context then
	case r.Context.Container != nil && r.Context.Container.ID == nil:
		return r, fmt.Errorf("context.container has no id: %s", b)
	}
	if string(r.Context.Services) == "null" {
		return r, fmt.Errorf("context.services is null: the runner counts it: %s", b)
	}
	if len(r.Context.Services) > 0 {
		var list []ResponseService
		if err := json.Unmarshal(r.Context.Services, &list); err != nil {
			return r, fmt.Errorf("context.services: %v: %s", err, b)
		}
		if len(list) != services {
			return r, fmt.Errorf("%d services answered for %d asked (the runner matches them by index): %s", len(list), services, b)
		}
		for i, s := range list {
			if s.Ports == nil {
				return r, fmt.Errorf("services[%d].ports is null: the runner dereferences it: %s", i, b)
			}
		}
	}
	return r, nil
}
